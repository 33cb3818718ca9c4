"""``ringtrace convert`` as the tests call it: the real command (the one path users run), its errors."""

from __future__ import annotations

import io
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from ringtrace.cli import main


def convert(paths: Sequence[Path], out: Path, fmt: str = "proto") -> list[str]:
    """Run ``ringtrace convert PATHS -o OUT --format FMT``; the error lines it printed (empty: it wrote the trace)."""
    err, sink = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(sink):
        code = main(["convert", *map(str, paths), "-o", str(out), "--format", fmt])
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    return lines if code or lines else []
