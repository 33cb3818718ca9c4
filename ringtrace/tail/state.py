"""Restart state for ``--state-dir``: which runs of which files were finished.

After a restart, a file whose finished run is recorded with the same identity (device,
inode, size, mtime) is not emitted again.  An unfinished run is read again from the start
(decoding runs at about a million records a second), so every sink gets the whole run once:
nothing is emitted twice, because runs reach the final sinks only when they finish.  Host logs
looked at for runs without a scope_stats file (``--host-log-glob``) are remembered the same way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import msgspec

STATE_FILE = "ringtrace-state.json"


class FileState(msgspec.Struct, frozen=True):
    dev: int
    ino: int
    size: int
    mtime_ns: int
    generation: int
    finished: bool


class State(msgspec.Struct, frozen=True):
    version: int = 1
    files: dict[str, FileState] = {}
    host_logs: dict[str, FileState] = {}  # host logs decided (``finished``: reported, or not a run of their own)


def load(directory: Path) -> tuple[State, str | None]:
    """The saved state, or an empty one and a warning when it cannot be read."""
    path = directory / STATE_FILE
    try:
        return msgspec.json.decode(path.read_bytes(), type=State), None
    except FileNotFoundError:
        return State(), None
    except (OSError, msgspec.DecodeError) as err:
        return State(), f"{path}: cannot read saved state ({err}); starting afresh"


def save(directory: Path, state: State) -> None:
    """Write atomically (temp file + rename).  Raises OSError; the caller logs it."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".state-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(msgspec.json.encode(state))
        os.replace(tmp, directory / STATE_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
