"""One followed file: offsets, rewrite/replace/delete detection, and the current :class:`Run`.

The runtime writes a file once, at teardown: ``fopen("w")`` (truncate in place, same inode),
the metadata line, then every record in a few large writes.  A re-run rewrites the same
path.  So between two looks the file may be: missing, empty, growing, cut mid-line, shrunk
and regrown (a re-run), or replaced by another inode.

A look at the file is two steps, so that the caller owns the I/O (the app awaits its reads,
``poll`` below does them synchronously) and nothing here blocks:

1. :meth:`Follower.look` with the ``os.stat_result`` of the open file: ends a run that was
   rewritten or replaced, starts a run, and returns a :class:`Slice` to read (at most
   :data:`SLICE` new bytes, plus the guard bytes before them and the first line), or None;
2. :meth:`Follower.take` with the bytes read: checks the guard and first line still read
   back unchanged (otherwise the file was rewritten in place), feeds the new bytes to the run
   and finishes it when every promised record has arrived.  ``more`` says a next slice is due.

Called from one thread at a time (the app's reader); ``now`` is a monotonic time in seconds
passed in by the caller, ``wall`` the wall-clock time for ``RunStarted.seen_at``.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from ringtrace.diagnose import Thresholds
from ringtrace.records import WANT_ALL, FinishReason, HostLog, Labels, SinkEvent, Source, Wants
from ringtrace.run import Run

SLICE = 1 << 20
"""Most new bytes one look reads: what is in flight per file is bounded by this."""
GUARD = 64
"""Bytes just before the offset that must read back unchanged; otherwise the file was rewritten."""


class NotRegular(OSError):
    """The path is not a regular file (a FIFO, a directory, a device): it is never opened for reading."""


class Slice(NamedTuple):
    """What :meth:`Follower.look` asks the caller to read."""

    head: int  # bytes at offset 0 to read back (the first line seen so far; 0: none)
    offset: int  # where the data read starts (the guard bytes, then new bytes)
    length: int
    size: int  # the file size the look saw


class Follower:
    """State of one path.  ``run`` is None between runs (after one finished, before bytes change)."""

    def __init__(self, path: Path, labels: Labels, thresholds: Thresholds, generation: int = 0,
                 wants: Wants = WANT_ALL, find_log: Callable[[Path], HostLog | None] | None = None) -> None:
        self.path = path
        self.labels = labels
        self.thresholds = thresholds
        self.generation = generation
        self.wants = wants
        self.find_log = find_log  # the run's host log, looked up when the run finishes (--host-log-glob)
        self.run: Run | None = None
        self.ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file being read
        self.offset = 0
        self.guard = b""  # the last GUARD bytes read, ending at offset
        self.first_line = b""  # up to the first newline (or GUARD bytes), to recognise a rewrite
        self.last_change = 0.0  # monotonic time bytes last arrived or the file last changed
        self.finished_size = -1  # file size when the last run finished
        self.finished_mtime = 0
        self.finished_reason: FinishReason | None = None

    @property
    def active(self) -> bool:
        return self.run is not None

    def unchanged_since_finish(self, st: os.stat_result) -> bool:
        """A finished file whose identity, size and mtime are what they were when its run ended."""
        return (self.run is None and self.finished_reason is not None
                and (st.st_dev, st.st_ino) == self.ident and st.st_size == self.finished_size
                and st.st_mtime_ns == self.finished_mtime)

    def pending(self, st: os.stat_result) -> bool:
        """Whether a look at a file with this stat would do anything."""
        if self.run is None:
            return not self.unchanged_since_finish(st)
        return (st.st_dev, st.st_ino) != self.ident or st.st_size != self.offset

    def _start(self, now: float, wall: float) -> None:
        self.run = Run(Source(str(self.path), self.labels, self.generation), self.thresholds, seen_at=wall,
                       wants=self.wants)
        self.offset = 0
        self.guard = b""
        self.first_line = b""
        self.last_change = now
        self.finished_reason = None

    def finish(self, reason: FinishReason, mtime_ns: int | None = None) -> list[SinkEvent]:
        """End the current run (if any) with ``reason``; ``mtime_ns`` is the file's, when the caller knows it."""
        run = self.run
        if run is None:
            return []
        self.run = None
        self.finished_reason = reason
        self.generation += 1
        self.finished_size = self.offset
        if mtime_ns is None:
            try:
                mtime_ns = os.stat(self.path).st_mtime_ns
            except OSError:
                mtime_ns = 0
        self.finished_mtime = mtime_ns
        if self.find_log is not None:
            run.host_log = self.find_log(self.path)
        return run.finish(reason, self.run_key() if reason in ("complete", "idle", "eof") else "")

    def run_key(self) -> str:
        """The finished run's identity across restarts: path and file identity (device, inode, size,
        mtime) when it finished.  Re-reading the same unchanged file gives the same key."""
        dev, ino = self.ident or (0, 0)
        raw = b"\0".join([os.fsencode(self.path), *(str(x).encode() for x in (dev, ino, self.finished_size,
                                                                             self.finished_mtime))])
        return hashlib.blake2b(raw, digest_size=12).hexdigest()

    def look(self, st: os.stat_result, now: float, wall: float) -> tuple[list[SinkEvent], Slice | None]:
        """Step 1: ``st`` is the fstat of the file just opened at ``path``."""
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{self.path}: not a regular file")
        ident = (st.st_dev, st.st_ino)
        out: list[SinkEvent] = []
        if self.run is not None and (ident != self.ident or st.st_size < self.offset):
            out += self.finish("rewritten")  # replaced (renamed over), or truncated in place by a re-run
        if self.run is None:
            if self.unchanged_since_finish(st):
                return out, None
            self.ident = ident
            self._start(now, wall)
        if st.st_size <= self.offset:
            return out, None
        guard = len(self.guard)
        new = min(SLICE, st.st_size - self.offset)
        return out, Slice(len(self.first_line) if self.offset else 0, self.offset - guard, guard + new, st.st_size)

    def take(self, want: Slice, head: bytes, data: bytes, now: float, st: os.stat_result
             ) -> tuple[list[SinkEvent], bool]:
        """Step 2: ``head`` and ``data`` were read as ``want`` asked.  Returns the events and whether more is due."""
        run = self.run
        assert run is not None, "take() follows a look() that returned a slice"
        guard = self.guard
        if head != self.first_line[: want.head] or data[: len(guard)] != guard:
            return self.finish("rewritten", st.st_mtime_ns), True  # rewritten in place: a new run from the start
        chunk = data[len(guard):]
        if not chunk:
            return [], False
        if not self.first_line:
            nl = chunk.find(b"\n")
            self.first_line = chunk[: nl + 1 if 0 <= nl < GUARD else GUARD]
        self.offset += len(chunk)
        self.guard = (guard + chunk)[-GUARD:] if len(chunk) < GUARD else chunk[-GUARD:]
        self.last_change = now
        out = run.feed(chunk)
        if self.offset >= want.size and run.decoder.pending == 0 and self._complete(run):
            out += self.finish("complete", st.st_mtime_ns)
            return out, False
        return out, self.offset < want.size

    def poll(self, now: float, wall: float) -> list[SinkEvent]:
        """Look at the file synchronously until it is read up to its current size (tests, one-shot use).

        A vanished file ends its run with reason ``deleted``.
        """
        out: list[SinkEvent] = []
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return self.finish("deleted", 0) if self.run is not None else []
        try:
            more = True
            while more:
                st = os.fstat(fd)
                events, want = self.look(st, now, wall)
                out += events
                if want is None:
                    break
                head = os.pread(fd, want.head, 0) if want.head else b""
                events, more = self.take(want, head, os.pread(fd, want.length, want.offset), now, st)
                out += events
        finally:
            os.close(fd)
        return out

    @staticmethod
    def _complete(run: Run) -> bool:
        """Every line the metadata promises (total - dropped records) has arrived."""
        meta = run.meta
        return meta is not None and meta.total is not None and run.decoder.line - 1 >= meta.total - meta.dropped

    def idle_for(self, now: float) -> float:
        return now - self.last_change
