"""One followed file: offsets, rewrite/replace/delete detection, and the current :class:`Run`.

The runtime writes a file once, at teardown: ``fopen("w")`` (truncate in place, same inode),
the metadata line, then every record in a few large writes.  A re-run rewrites the same
path.  So between two looks the file may be: missing, empty, growing, cut mid-line, shrunk
and regrown (a re-run), or replaced by another inode.  :meth:`Follower.poll` reads what is
new and returns the sink events; it never raises for file trouble (a vanished file ends the
run with reason ``deleted``).

Called from one thread at a time (the app's reader); ``now`` is a monotonic time in seconds
passed in by the caller, ``wall`` the wall-clock time for ``RunStarted.seen_at``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ringtrace.diagnose import Thresholds
from ringtrace.records import FinishReason, Labels, SinkEvent, Source
from ringtrace.run import Run

CHUNK = 1 << 20
GUARD = 64
"""Bytes just before the offset that must read back unchanged; otherwise the file was rewritten."""


class Follower:
    """State of one path.  ``run`` is None between runs (after one finished, before bytes change)."""

    def __init__(self, path: Path, labels: Labels, thresholds: Thresholds, generation: int = 0) -> None:
        self.path = path
        self.labels = labels
        self.thresholds = thresholds
        self.generation = generation
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

    def _start(self, now: float, wall: float) -> None:
        self.run = Run(Source(str(self.path), self.labels, self.generation), self.thresholds, seen_at=wall)
        self.offset = 0
        self.guard = b""
        self.first_line = b""
        self.last_change = now
        self.finished_reason = None

    def finish(self, reason: FinishReason) -> list[SinkEvent]:
        """End the current run (if any) with ``reason``."""
        run = self.run
        if run is None:
            return []
        self.run = None
        self.finished_reason = reason
        self.generation += 1
        self.finished_size = self.offset
        try:
            self.finished_mtime = os.stat(self.path).st_mtime_ns
        except OSError:
            self.finished_mtime = 0
        return run.finish(reason)

    def poll(self, now: float, wall: float) -> list[SinkEvent]:
        """Look at the file once: read new bytes, detect rewrites, finish a complete run."""
        if self.run is None and self.finished_reason is not None:
            try:  # a finished file: one stat tells whether anything changed
                st = os.stat(self.path)
            except OSError:
                return []
            if ((st.st_dev, st.st_ino) == self.ident and st.st_size == self.finished_size
                    and st.st_mtime_ns == self.finished_mtime):
                return []
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return self.finish("deleted") if self.run is not None else []
        try:
            return self._poll_fd(fd, now, wall)
        finally:
            os.close(fd)

    def _poll_fd(self, fd: int, now: float, wall: float) -> list[SinkEvent]:
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        out: list[SinkEvent] = []
        if self.run is not None:
            if ident != self.ident:
                out += self.finish("rewritten")  # replaced (renamed over): a new file at this path
            elif st.st_size < self.offset or not self._unchanged(fd):
                out += self.finish("rewritten")  # truncated in place by a re-run
        if self.run is None:
            if self.finished_reason is not None and ident == self.ident and (
                    st.st_size == self.finished_size and st.st_mtime_ns == self.finished_mtime):
                return out  # a finished file that has not changed
            self.ident = ident
            self._start(now, wall)
        run = self.run
        assert run is not None
        if st.st_size > self.offset:
            out += self._read(fd, run, st.st_size)
            self.last_change = now
            if run.decoder.pending == 0 and self._complete(run):
                out += self.finish("complete")
        return out

    def _unchanged(self, fd: int) -> bool:
        """The bytes we already read still sit where they were (first line and the guard before offset)."""
        if self.first_line and os.pread(fd, len(self.first_line), 0) != self.first_line:
            return False
        return not self.guard or os.pread(fd, len(self.guard), self.offset - len(self.guard)) == self.guard

    def _read(self, fd: int, run: Run, size: int) -> list[SinkEvent]:
        out: list[SinkEvent] = []
        while self.offset < size:
            chunk = os.pread(fd, min(CHUNK, size - self.offset), self.offset)
            if not chunk:
                break
            if not self.first_line:
                nl = chunk.find(b"\n")
                self.first_line = chunk[: nl + 1 if 0 <= nl < GUARD else GUARD]
            self.offset += len(chunk)
            self.guard = (self.guard + chunk)[-GUARD:]
            out += run.feed(chunk)
        return out

    @staticmethod
    def _complete(run: Run) -> bool:
        """Every line the metadata promises (total - dropped records) has arrived."""
        meta = run.meta
        return meta is not None and meta.total is not None and run.decoder.line - 1 >= meta.total - meta.dropped

    def idle_for(self, now: float) -> float:
        return now - self.last_change
