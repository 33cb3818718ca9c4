"""A real writer process (tests/_support/writer_process.py) and condition waits with deadlines (tailing tests)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

WRITER = Path(__file__).parent / "writer_process.py"


class Writer:
    """A separate process that performs file operations on request (see writer_process.py)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WRITER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def do(self, op: str, **kw: Any) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if "data" in kw:
            kw["hex"] = kw.pop("data").hex()
        kw = {k: str(v) if isinstance(v, Path) else v for k, v in kw.items()}
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer == "ok\n", f"writer failed on {op}: {answer!r}"

    def write_file(self, path: Path, data: bytes, splits: list[int] | None = None,
                   between: Callable[[], None] | None = None) -> None:
        """fopen("w"), write ``data`` in pieces cut at ``splits``, calling ``between`` after each piece."""
        self.do("open", path=path, mode="w")
        cuts = [0, *sorted(splits or []), len(data)]
        for a, b in itertools.pairwise(cuts):
            self.do("write", data=data[a:b])
            if between is not None:
                between()
        self.do("close")

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def writer_fixture() -> Iterator[Writer]:
    """Body of the ``writer`` fixtures: one writer process per test."""
    w = Writer()
    yield w
    w.close()


def wait_for(cond: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``cond`` until it holds; fail after ``timeout`` seconds.  Not a sleep: returns as soon as it holds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
