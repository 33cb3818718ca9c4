"""What one in-process run of ``ringtrace.cli.main`` printed (the ``cli`` fixture's answer)."""

from __future__ import annotations

import json
from typing import Any


class Result:
    """Exit code, stdout and stderr of one command; ``json`` parses the whole stdout as one document."""

    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    @property
    def json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.out)
        return doc

    def files(self) -> list[dict[str, Any]]:
        """``files[]`` of a ``summary --format json`` answer."""
        return list(self.json["files"])

    def file(self, index: int = 0) -> dict[str, Any]:
        f: dict[str, Any] = self.json["files"][index]
        return f
