"""Fixtures for the host-log tests: ``cli`` runs ``ringtrace.cli.main`` in-process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from tests.cli.test_cli import Result as CliResult


class Result(CliResult):
    def files(self) -> list[dict[str, Any]]:
        return list(self.json["files"])


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """``cli(*argv)`` -> :class:`Result`; fails the test if the command printed a traceback."""
    def run(*argv: str | Path) -> Result:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return Result(code, out, err)

    return run
