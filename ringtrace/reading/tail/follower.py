"""One followed file: offsets, rewrite/replace/delete detection, the current :class:`Run` and the run's identity.

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

**A run's identity is its content.**  Every byte read is hashed (SHA-256, :data:`DIGEST_HEX`
hex digits kept); a finished run is remembered as :class:`Finished`: the file (device, inode),
its size and mtime at the finish, that hash, and the path the run was read at.  Its
:attr:`Finished.key` (``RunFinished.key``, the events file's ``run_key``) is made of that path,
the inode, the size and the hash, never of the mtime.  (The path is in it because inode numbers
are used again: a new run directory holding the same bytes as a deleted one is another run.)
Its :attr:`Finished.content_key` (``RunFinished.content_key``) is the same without the path and
with the mtime: the run under another name (a directory renamed while the agent was down and its
state missed the finish) has the same content key, and a new file on a used-again inode with the
same bytes almost surely another mtime.  A sink that dedupes (the events file) knows a run by
either.  Both are fixed at the run's first finish.  So:

* a file whose size and mtime are what they were at the finish is unchanged (nothing is read);
* same inode and size but another mtime (``touch``, ``os.utime``, a restore): the file is read
  again *without decoding*, a slice at a time, and only hashed; the same hash is the same run
  (nothing is emitted, the new mtime is remembered), another hash a new version (a new run).
  A re-run that writes the very same bytes is therefore the same run;
* another path to a file another follower reads or finished (a renamed directory, a tree given
  twice through a symbolic link, a hard link, a directory renamed while ringtrace was down):
  :class:`Inodes`, shared by one tailer's followers, says which follower reads each (device,
  inode) now and what the last finished run of each was.  A path to a file being read waits (it
  is an alias; the reading follower reports the run); a path to a finished, unchanged file takes
  that run's identity without reading it.  (A file moved while ringtrace runs is followed at its
  new path by the same follower: the tailer's ``_Moves``.);
* two files with the same bytes (every rank of a deterministic program) are different inodes,
  so different runs;
* a finished file that grows with its bytes unchanged (more records after the finish: the runtime
  writes a file once, so this is an anomaly, counted in :attr:`Inodes.appended`): it is checked by
  hashing the old bytes, then read again from the start as *the same run* (its source, generation
  and keys), so that sinks update that run's figures (the metrics, the Perfetto trace of the same
  name, OTLP spans of the same trace) and the events file, which knows its key, writes it once.

**Records beyond ``total``.**  When every record the metadata promises has arrived at the end of
the file, the run is finished at once if the file was last modified at least ``settle`` seconds
ago; otherwise it waits until the file has been quiet that long (:meth:`Follower.settled`, the
tailer's tick), so a file holding more records than ``total`` that is read while it is written
is one run, with every record, marked as ``summary`` marks it (``complete: false``, the
``incomplete`` warning).  ``settle`` 0 finishes at once (``--once``).

Called from one thread at a time (the app's reader); ``now`` is a monotonic time in seconds
passed in by the caller, ``wall`` the wall-clock time for ``RunStarted.seen_at``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple, Protocol

import msgspec
import xxhash

from ringtrace.analysis.advise import advise
from ringtrace.config import Thresholds
from ringtrace.model.records import WANT_ALL, FinishReason, HostLog, Labels, RunFinished, SinkEvent, Source, Wants
from ringtrace.sources.paths import source_labels
from ringtrace.stages.run import Run

log = logging.getLogger("ringtrace.reading.tail")

SLICE = 1 << 20
"""Most new bytes one look reads when the sinks take records or pair events: what is in flight per
file is bounded by this."""
SUMMARY_SLICE = 4 << 20
"""Most new bytes one look reads when the sinks take only summaries (events file, Prometheus): a slice
costs about six hand-offs between the event loop and the reader thread (~1 ms) and the compiled core
decodes 1 MiB in ~0.6 ms, so at 1 MiB the hand-offs were a third of such a watch's reading; a slice
of records is kept at 1 MiB, whose objects weigh several times its bytes (docs/performance.md)."""
GUARD = 64
"""Bytes just before the offset that must read back unchanged; otherwise the file was rewritten."""
SETTLE = 0.5
"""Seconds a run that holds every promised record waits for more bytes (the tailer's default ``settle``).
The runtime writes a whole file within about 60 ms."""
DIGEST_HEX = 32
"""Hex digits of the content hash kept (128 bits)."""
XXH3 = "xxh3:"
"""How a digest made by :func:`new_content` begins; one without it was saved by an older ringtrace (SHA-256)."""



class Hasher(Protocol):
    """What the follower needs of a hash object (hashlib's and xxhash's)."""

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...



def new_content(saved: str = "") -> Hasher:
    """The content hash of a run's bytes: XXH3-128 (about 18x cheaper than SHA-256 per MB; an identity, not a
    defence); to check a ``saved`` digest of an older ringtrace, SHA-256 as it was made."""
    return hashlib.sha256() if saved and not saved.startswith(XXH3) else xxhash.xxh3_128()


def digest_of(h: Hasher) -> str:
    """The digest kept for ``h`` (see :data:`XXH3`)."""
    return (XXH3 if isinstance(h, xxhash.xxh3_128) else "") + h.hexdigest()[:DIGEST_HEX]

FileId = tuple[int, int]
"""(st_dev, st_ino)."""
RunId = tuple[str, int]
"""How the app names a finished run until the sinks took it: (path, generation) of its source."""


class NotRegular(OSError):
    """The path is not a regular file (a FIFO, a directory, a device): it is never opened for reading."""


class Slice(NamedTuple):
    """What :meth:`Follower.look` asks the caller to read."""

    head: int  # bytes at offset 0 to read back (the first line seen so far; 0: none)
    offset: int  # where the data read starts (the guard bytes, then new bytes)
    length: int
    size: int  # the file size the look saw


def run_key(path: str, ino: int, size: int, digest: str) -> str:
    """A finished run's identity across restarts: the path it was read at, its file's inode, size and content hash."""
    if not digest:
        return ""
    raw = b"\0".join([os.fsencode(path), f"{ino}:{size}:{digest}".encode()])
    return hashlib.blake2b(raw, digest_size=12).hexdigest()


def content_key(ino: int, size: int, digest: str, mtime_ns: int) -> str:
    """The same run under any name: its file's inode, size, content hash and mtime (no path)."""
    if not digest:
        return ""
    return hashlib.blake2b(f"content:{ino}:{size}:{digest}:{mtime_ns}".encode(), digest_size=12).hexdigest()


class Finished(NamedTuple):
    """The identity of a finished run (``complete``, ``idle``, ``eof``): its file and content at the finish."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    digest: str  # content hash of bytes [0, size); "" unknown (a state saved by an older version)
    path: str  # where the run was read (its source path)
    generation: int = -1  # the run's generation (for the app's undelivered check); -1 unknown
    keys: tuple[str, str] = ("", "")  # (key, content_key) fixed at the run's first finish; "": from the fields

    @property
    def key(self) -> str:
        return self.keys[0] or run_key(self.path, self.ino, self.size, self.digest)

    @property
    def content_key(self) -> str:
        return self.keys[1] or content_key(self.ino, self.size, self.digest, self.mtime_ns)

    def fixed(self) -> Finished:
        """This run with its keys fixed: a later mtime (a touch) or more bytes (an append) keep them."""
        return self._replace(keys=(self.key, self.content_key))

    @property
    def run(self) -> RunId:
        return (self.path, self.generation)

    def same(self, st: os.stat_result) -> bool:
        """The file ``st`` describes is the one that run finished with, unchanged (size and mtime)."""
        return (self.ino, self.size, self.mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


class Inodes:
    """What one tailer's followers know of files by (device, inode), whatever path reached them.

    ``reading``: the follower whose run reads each file now (another path to it waits);
    ``finished``: the last finished run of each file, the newest kept (:meth:`trim`), also of files
    whose path went away.  Another path takes a finished run only when its file is unchanged (inode,
    size and mtime to the nanosecond): an inode number used again by a new file is not that run.
    """

    def __init__(self) -> None:
        self.reading: dict[FileId, Follower] = {}
        self.finished: OrderedDict[FileId, Finished] = OrderedDict()
        self.appended = 0  # finished runs whose file grew afterwards with its bytes unchanged (read again)

    def remember(self, fin: Finished) -> None:
        fid = (fin.dev, fin.ino)
        self.finished[fid] = fin
        self.finished.move_to_end(fid)

    def trim(self, keep: int) -> None:
        """Keep the ``keep`` newest finished identities."""
        while len(self.finished) > keep:
            self.finished.popitem(last=False)

    def forget(self, f: Follower) -> None:
        """``f``'s path is gone: it reads nothing.  What it finished stays (a path that reaches the same
        file unchanged, size and mtime, takes it: a renamed directory), until :meth:`trim`."""
        if f.ident is not None and self.reading.get(f.ident) is f:
            del self.reading[f.ident]


class Follower:
    """State of one path.  ``run`` is None between runs (after one finished, before bytes change)."""

    def __init__(self, path: Path, labels: Labels, thresholds: Thresholds, generation: int = 0,
                 wants: Wants = WANT_ALL, find_log: Callable[[Path], HostLog | None] | None = None,
                 inodes: Inodes | None = None, settle: float = 0.0) -> None:
        self.path = path
        self.labels = labels
        self.thresholds = thresholds
        self.generation = generation
        self.wants = wants
        self.slice = SLICE if wants.records or wants.events else SUMMARY_SLICE
        self.find_log = find_log  # the run's host log, looked up when the run finishes (--host-log-glob)
        self.inodes = inodes if inodes is not None else Inodes()
        self.settle = settle
        self.run: Run | None = None
        self.ident: FileId | None = None  # (st_dev, st_ino) of the file being read, or of the last finished run
        self.offset = 0
        self.guard = b""  # the last GUARD bytes read, ending at offset
        self.first_line = b""  # up to the first newline (or GUARD bytes), to recognise a rewrite
        self.last_change = 0.0  # monotonic time bytes last arrived or the file last changed
        self.content: Hasher = new_content()  # of the run's bytes [0, offset) (between runs: of a check's bytes)
        self.read_mtime = 0  # the file's mtime at the look whose bytes were read last
        self.complete = False  # every promised record has arrived; waiting ``settle`` quiet seconds for more
        self.finished: Finished | None = None  # the last finished run's identity (None: none, or cut short)
        self.finished_reason: FinishReason | None = None
        self.checking: Finished | None = None  # a re-read that only hashes: does the file still hold this run?
        self._check_at = 0
        self.continues: Finished | None = None  # the finished run this run reads again (its file grew)
        self.resumes: Finished | None = None  # a restart's: the next run is that one read again (saved state)
        self._wall = 0.0  # the wall clock of the last look

    @property
    def active(self) -> bool:
        return self.run is not None

    def unchanged_since_finish(self, st: os.stat_result) -> bool:
        """A finished file whose identity, size and mtime are what they were when its run ended."""
        fin = self.finished
        return self.run is None and self.checking is None and fin is not None and fin.dev == st.st_dev and fin.same(st)

    def pending(self, st: os.stat_result) -> bool:
        """Whether a look at a file with this stat would do anything."""
        if self.run is None:
            return not self.unchanged_since_finish(st)
        return (st.st_dev, st.st_ino) != self.ident or st.st_size != self.offset

    def settled(self, now: float) -> bool:
        """A run that holds every promised record and has had no new bytes for ``settle`` seconds."""
        return self.run is not None and self.complete and now - self.last_change >= self.settle

    def _start(self, fid: FileId, st: os.stat_result, now: float, wall: float,
               continues: Finished | None = None) -> None:
        """A new run of the file from its start; with ``continues``, that finished run read again (its source)."""
        source = Source(str(self.path), self.labels, self.generation)
        resumes, self.resumes = self.resumes, None
        if continues is None and resumes is not None and resumes.ino == st.st_ino:
            continues = resumes  # the same file: the run it was reading again when the agent stopped
        if continues is not None:
            gen = continues.generation if continues.generation >= 0 else max(0, self.generation - 1)
            labels = self.labels if continues.path == str(self.path) else source_labels(Path(continues.path))
            source = Source(continues.path, labels, gen)
        self.run = Run(source, self.thresholds, seen_at=wall, wants=self.wants, advise=advise)
        self.continues = continues
        self.ident = fid
        self.offset = 0
        self.guard = b""
        self.first_line = b""
        self.last_change = now
        self.content = new_content()
        self.read_mtime = st.st_mtime_ns
        self.complete = False
        self.finished = None  # the file no longer holds that run
        self.finished_reason = None
        self.checking = None
        self.inodes.reading[fid] = self

    def _adopt(self, fin: Finished, why: str) -> None:
        """This path holds ``fin``'s run, unchanged: nothing to read or report."""
        fid = (fin.dev, fin.ino)
        self.finished = fin
        self.finished_reason = self.finished_reason or "complete"
        self.ident = fid
        self.checking = None
        self.inodes.remember(fin)
        if why:
            log.info("%s: %s: the same run (run_key %s), not reported again", self.path, why, fin.key)

    def finish(self, reason: FinishReason, mtime_ns: int | None = None) -> list[SinkEvent]:
        """End the current run (if any) with ``reason``.  A run that had every promised record ends as
        ``complete`` whatever the reason (it was only waiting for more bytes).  ``mtime_ns``: the file's,
        when the caller knows it (0 or None: that of the look whose bytes were read last)."""
        run = self.run
        if run is None:
            return []
        if self.complete:
            reason = "complete"
        continues, self.continues = self.continues, None
        self.run = None
        self.complete = False
        self.finished_reason = reason
        self.generation = max(self.generation, run.source.generation + 1)
        if self.ident is not None and self.inodes.reading.get(self.ident) is self:
            del self.inodes.reading[self.ident]
        keys = continues.keys if continues is not None else ("", "")  # a run read again keeps its identity
        if reason in ("complete", "idle", "eof") and self.ident is not None:
            fin = Finished(self.ident[0], self.ident[1], self.offset,
                           mtime_ns or self.read_mtime,
                           digest_of(self.content), run.source.path, run.source.generation,
                           keys).fixed()
            self.finished = fin
            self.inodes.remember(fin)
            keys = fin.keys
        else:
            self.finished = None  # cut short: not a content this file is known to hold
        if self.find_log is not None:
            run.host_log = self.find_log(self.path)
        out = run.finish(reason, keys[0])
        if keys[1] and out and type(out[-1]) is RunFinished:
            out[-1] = run.finished = msgspec.structs.replace(out[-1], content_key=keys[1])
        return out

    def run_key(self) -> str:
        """The key of the last finished run ("" when it was cut short, or none finished)."""
        return self.finished.key if self.finished is not None else ""

    def look(self, st: os.stat_result, now: float, wall: float) -> tuple[list[SinkEvent], Slice | None]:
        """Step 1: ``st`` is the fstat of the file just opened at ``path``."""
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(f"{self.path}: not a regular file")
        self._wall = wall
        fid = (st.st_dev, st.st_ino)
        out: list[SinkEvent] = []
        if self.run is not None and (fid != self.ident or st.st_size < self.offset):
            out += self.finish("rewritten")  # replaced (renamed over), or truncated in place by a re-run
        if self.run is None:
            want = self._between_runs(fid, st, now, wall)
            if self.run is None:
                return out, want
        if st.st_size <= self.offset:
            return out, None
        guard = len(self.guard)
        new = min(self.slice, st.st_size - self.offset)
        return out, Slice(len(self.first_line) if self.offset else 0, self.offset - guard, guard + new, st.st_size)

    def _between_runs(self, fid: FileId, st: os.stat_result, now: float, wall: float) -> Slice | None:
        """No run is open: is the file the content of a finished run (nothing to do), one to check by
        hashing (the slice to read), a file another path reads now (wait), or a new run (started)?"""
        chk = self.checking
        if chk is not None:
            if (chk.dev, chk.ino) == fid and st.st_size >= chk.size:
                return Slice(0, self._check_at, min(self.slice, chk.size - self._check_at), st.st_size)
            self.checking = None  # changed while being checked: a new run
            self._start(fid, st, now, wall)
            return None
        own, known = self.finished, self.inodes.finished.get(fid)
        if own is not None and own.same(st):
            if own.dev != st.st_dev:  # the same path, inode, size and mtime: only the device number moved (a reboot)
                self._adopt(own._replace(dev=st.st_dev), "")
            return None
        if known is not None and known.same(st):
            self._adopt(known, f"the file of a finished run reached by another path (inode {st.st_ino})")
            return None
        reader = self.inodes.reading.get(fid)
        if reader is not None and reader is not self and reader.run is not None and reader.ident == fid:
            return None  # another path to a file being read: that follower reports the run
        if own is not None and own.digest and own.ino == st.st_ino and st.st_size >= own.size:
            if own.size == 0:
                if st.st_size == 0:
                    self._adopt(own._replace(dev=st.st_dev, mtime_ns=st.st_mtime_ns), "")
                    return None
            else:  # only its mtime changed, or bytes were appended after the finish, perhaps: hash it to know
                self.checking = own._replace(dev=st.st_dev)
                self._check_at = 0
                self.content = new_content(own.digest)
                return Slice(0, 0, min(self.slice, own.size), st.st_size)
        self._start(fid, st, now, wall)
        return None

    def take(self, want: Slice, head: bytes, data: bytes, now: float, st: os.stat_result
             ) -> tuple[list[SinkEvent], bool]:
        """Step 2: ``head`` and ``data`` were read as ``want`` asked.  Returns the events and whether more is due."""
        if self.checking is not None:
            return [], self._take_check(want, data, now, st)
        run = self.run
        assert run is not None, "take() follows a look() that returned a slice"
        guard = self.guard
        if head != self.first_line[: want.head] or data[: len(guard)] != guard:
            return self.finish("rewritten"), True  # rewritten in place: a new run from the start
        chunk = data[len(guard):]
        if not chunk:
            return [], False
        if not self.first_line:
            nl = chunk.find(b"\n")
            self.first_line = chunk[: nl + 1 if 0 <= nl < GUARD else GUARD]
        self.content.update(chunk)
        self.offset += len(chunk)
        self.guard = (guard + chunk)[-GUARD:] if len(chunk) < GUARD else chunk[-GUARD:]
        self.last_change = now
        self.read_mtime = st.st_mtime_ns
        out = run.feed(chunk)
        self.complete = self.offset >= want.size and run.decoder.pending == 0 and self._has_all(run)
        if self.complete and (self.settle <= 0 or self._wall - st.st_mtime >= self.settle):
            out += self.finish("complete")  # written a while ago: nothing more is coming
            return out, False
        return out, self.offset < want.size

    def _take_check(self, want: Slice, data: bytes, now: float, st: os.stat_result) -> bool:
        chk = self.checking
        assert chk is not None
        if want.offset != self._check_at or len(data) != want.length:
            self.checking = None  # the file shrank under the check: changed
            self._start((st.st_dev, st.st_ino), st, now, self._wall)
            return True
        self.content.update(data)
        self._check_at += len(data)
        if self._check_at < chk.size:
            return True
        self.checking = None
        if digest_of(self.content) != chk.digest:
            self._start((st.st_dev, st.st_ino), st, now, self._wall)  # another content: a new version
            return True
        if st.st_size == chk.size:
            self._adopt(chk.fixed()._replace(mtime_ns=st.st_mtime_ns), "modified (mtime) with the same content")
            return False
        self.inodes.appended += 1  # more bytes after the finish: the same run, read again and updated
        log.warning("%s: %d byte(s) appended after its run finished (%s, %d bytes): the same run, read again to "
                    "update its figures (run_key %s; reported once on --events)", self.path, st.st_size - chk.size,
                    self.finished_reason or "complete", chk.size, chk.key)
        self._start((st.st_dev, st.st_ino), st, now, self._wall, chk.fixed())
        return True

    def poll(self, now: float, wall: float) -> list[SinkEvent]:
        """Look at the file synchronously until it is read up to its current size (tests, one-shot use).

        A vanished file ends its run with reason ``deleted``; a settled run (:meth:`settled`) is finished.
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
        if self.settled(now):
            out += self.finish("complete")
        return out

    @staticmethod
    def _has_all(run: Run) -> bool:
        """Every line the metadata promises (total - dropped records) has arrived."""
        meta = run.meta
        return meta is not None and meta.total is not None and run.decoder.line - 1 >= meta.total - meta.dropped

    def idle_for(self, now: float) -> float:
        return now - self.last_change
