"""Restart state for ``--state-dir``: which runs of which files were finished.

After a restart, a file whose finished run is recorded with the same identity (device, inode,
size, mtime) is not emitted again; one whose mtime alone changed is hashed and compared with the
recorded content hash (``digest``).  An unfinished run is read again from the start (decoding
runs at about a million records a second), so every sink gets the whole run once: nothing is
emitted twice, because runs reach the final sinks only when they finish.  Host logs looked at for
runs without a scope_stats file (``--host-log-glob``) are remembered the same way.

:class:`Store` is the state file of one directory.  A file that cannot be used (not JSON, half
of it, empty, not a state, a directory in its place, unreadable) is moved aside as
``ringtrace-state.json.corrupt-<UTC time>`` with a warning saying so, and the run starts afresh
(every file is read again; the events file's key index keeps runs it holds from being written
twice).  Saving is atomic (a temp file renamed over); a failure (full disk, read-only directory)
is logged as an error once per kind, with what it means, and the recovery once; a directory that
appears in the file's place is moved aside and the save tried again.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import msgspec

from ringtrace.files import write_atomic

STATE_FILE = "ringtrace-state.json"
VERSION = 3
"""3: files carry their run's keys (``key``, ``content_key``, fixed at its first finish); 2: finished
files carry their content hash (``digest``).  Older files are read (keys computed from the fields;
without a hash a file whose mtime changed is read again)."""

log = logging.getLogger("ringtrace.reading.tail.state")


class FileState(msgspec.Struct, frozen=True):
    dev: int
    ino: int
    size: int
    mtime_ns: int
    generation: int
    finished: bool
    digest: str = ""  # the content hash of a finished run's bytes [0, size) (follower.Finished.digest)
    key: str = ""  # the run's keys (follower.Finished.keys): of the finished run, or of the one an open run
    content_key: str = ""  # reads again (its file grew after the finish); "" none or computed from the fields


class State(msgspec.Struct, frozen=True):
    version: int = VERSION
    files: dict[str, FileState] = {}
    host_logs: dict[str, FileState] = {}  # host logs decided (``finished``: reported, or not a run of their own)


def save(directory: Path, state: State) -> None:
    """Write atomically (temp file + rename).  Raises OSError; the caller logs it."""
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(directory / STATE_FILE, msgspec.json.encode(state), mode=0o600)


def move_aside(path: Path) -> Path:
    """Rename ``path`` to ``<path>.corrupt-<UTC time>`` (``-2``, ``-3``... when taken); the new path.
    Raises OSError."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while os.path.lexists(aside):
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    os.rename(path, aside)
    return aside


class Store:
    """The state file of ``directory``: :meth:`load` once, then :meth:`save` as often as wanted.  Never raises."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / STATE_FILE
        self.failing: str | None = None  # the save error last logged, until a save works again
        self.failures = 0  # saves that failed since the last one that worked

    def load(self) -> State:
        """The saved state; an empty one when there is none, or when the file cannot be used (then moved aside)."""
        path = self.path
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return State()
        except OSError as err:  # a directory in its place, EACCES, EIO
            self._unusable(err.strerror or str(err))
            return State()
        try:
            state = msgspec.json.decode(data, type=State)
        except msgspec.DecodeError as err:  # garbage, half a file, JSON that is not a state (also ValidationError)
            self._unusable("empty" if not data else f"not a readable state: {err}")
            return State()
        if state.version > VERSION:
            log.warning("%s: saved by a newer ringtrace (state version %d; this one writes %d): read as far as "
                        "understood", path, state.version, VERSION)
        return state

    def _unusable(self, why: str) -> None:
        consequence = ("starting afresh: every file is read again (the events file's key index keeps the runs it "
                       "holds from being written twice; other sinks see them again)")
        try:
            aside = move_aside(self.path)
        except OSError as err:
            log.error("%s: saved state unusable (%s) and it cannot be moved aside (%s); %s; saving the state "
                      "will be tried and fail loudly while it stays", self.path, why, err.strerror or err,
                      consequence)
            return
        log.warning("%s: saved state unusable (%s); moved aside to %s; %s", self.path, why, aside.name, consequence)

    def save(self, state: State) -> bool:
        """Save ``state`` atomically; False when it could not be (logged once per kind of failure)."""
        try:
            try:
                save(self.directory, state)
            except IsADirectoryError:
                if not self.path.is_dir():
                    raise
                aside = move_aside(self.path)  # a directory appeared in the file's place: out of the way, again
                log.warning("%s: a directory in the state file's place; moved aside to %s", self.path, aside.name)
                save(self.directory, state)
        except OSError as err:
            self.failures += 1
            text = f"{type(err).__name__}: {err.strerror or err}"
            if text != self.failing:
                self.failing = text
                log.error("cannot save state in %s: %s; runs finished from now on are read again after a "
                          "restart (the events file's key index keeps them from being written twice); "
                          "trying again at every save", self.directory, err.strerror or err)
            return False
        if self.failing is not None:
            log.warning("state saved again in %s (after %d failed save(s): %s)", self.directory, self.failures,
                        self.failing)
            self.failing = None
            self.failures = 0
        return True
