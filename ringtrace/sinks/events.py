"""The events sink: one JSON line per finished run (the summary's file object + ``reason``).

Every line is written whole or not at all: it is built in memory and handed to the kernel in
one ``os.write`` on the stream's file descriptor (``O_APPEND``, as :meth:`EventsSink.open` and
Python's ``"ab"`` open it).  When a regular file takes only part of a line (a full disk) or the
write fails, the file is truncated back to where the line started and the error is raised to the
:class:`~ringtrace.sinks.FanOut`, which logs and counts it: that run's line is lost, the file holds
only whole lines.  A process killed (SIGKILL) during the ``os.write`` of a line longer than a page
can still leave a torn last line (the kernel stops a write at a fatal signal between pages):
:meth:`EventsSink.open` cuts such a tail back to the last newline (logged, counted in
:attr:`EventsSink.torn_bytes_cut`), so the next line starts on a line of its own and the torn run,
whose key was in the cut bytes, is written again whole.  Until then a reader should ignore a last
line without a newline.  Pipes and terminals (``--events -``) cannot be truncated; there the stream
completes short writes itself.  A string that still holds surrogate escapes (a path that is not
UTF-8) is written as JSON ``\\udcXX`` escapes rather than losing the line.

**Each run once** (by ``run_key``, or by ``RunFinished.content_key``: the same run under another name),
across restarts, lost state files, renames and rotations: the keys written are kept in a key index
beside the file, ``FILE.keys`` (:class:`KeyIndex`): one line per key (two per events line),
``<16 hex digits of the key's hash> <where that events line ends in FILE>``, appended
(one ``write`` of whole lines, truncated back on a short write) after the events line is written.
At open, once a torn tail is cut, the index is read whole and every key whose line ends past the end of
the events file is dropped (the file's tail was lost while the index kept its keys: a power cut after
the index reached the disk, a restore from a backup, any truncation), so those runs are written again;
then the events file is scanned from where the last key kept says its line ends (all of the file when
there is no index, it has an unreadable line, or no key is left), so a line written just before a
kill, whose key did not reach the index, is found too.  Keys whose lines went with a rotated file
(the sink saw it renamed away, deleted or truncated under it) are kept with the end 0: no truncation
of the new file drops them.
The index keeps the newest :data:`KEYS_KEPT` keys; it is rewritten (atomically: temp file and
rename) with those when it holds half as many lines again, and at open when keys were dropped.

**Rotation.**  Before each line the path's inode is compared with the open file's (one ``stat``,
about 3 us against the 50-100 us of encoding a line): a file renamed away (logrotate without
``copytruncate``) or deleted is followed by a new file at the path, and the line goes there.
:meth:`EventsSink.reopen` (SIGHUP) does the same at once.  ``copytruncate`` works as before
(``O_APPEND`` writes at the new end; the sink sees the file shorter than its last line's end before
the next line).  The key index is not rotated: keep ``FILE.keys`` out of the rotation's pattern; runs
of rotated files are still not written again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import logging
import os
import stat
import sys
import threading
from collections.abc import Iterable, Iterator
from typing import IO, TYPE_CHECKING

import msgspec

from ringtrace.files import write_atomic_fd
from ringtrace.model.records import WANT_SUMMARIES, RunFinished, SinkEvent
from ringtrace.sinks.base import Sink
from ringtrace.sinks.summary import file_object

if TYPE_CHECKING:
    from typing_extensions import Buffer

KEYS_KEPT = 200_000
"""Run keys remembered (the newest; two per run: 100,000 runs): a restart without its state over more
finished runs than that can write the oldest again.  About 90 bytes of memory (measured: 18 MB at the
bound) and 25 bytes of index file each."""
INDEX_SUFFIX = ".keys"
_CHUNK = 1 << 16
"""How much is read at a time when looking back for the last newline of a torn file."""
_SCAN = 1 << 20
"""How much of the events file is read at a time when it is scanned for run keys."""

log = logging.getLogger("ringtrace.sinks.events")


class _Keyed(msgspec.Struct):
    """The part of an events line the dedupe reads (every other field is skipped unread)."""

    run_key: str = ""


_KEY_OF = msgspec.json.Decoder(_Keyed)


def run_keys(data: bytes, at_start: bool) -> list[str]:
    """The ``run_key`` of every whole line of ``data`` that parses as a JSON object, in order.

    ``data`` is a window of an events file; ``at_start`` says it starts at the file's first byte,
    else everything up to its first newline is a fragment and skipped (start the window one byte
    before the first line wanted).  A last line without a newline (a torn
    write) is skipped too, as is any line a JSON reader cannot read: a run counts as written only
    when its line is readable.
    """
    lines = data.split(b"\n")
    lines.pop()  # the bytes after the last newline: b"" for a file of whole lines, else a torn tail
    if not at_start and lines:
        lines.pop(0)
    keys = []
    for line in lines:
        if b'"run_key"' not in line:
            continue  # most foreign lines, cheaply
        try:
            key = _KEY_OF.decode(line).run_key
        except msgspec.DecodeError:  # also ValidationError; msgspec refuses lone surrogate escapes, json does not
            key = _key_by_json(line)
        if key:
            keys.append(key)
    return keys


def scan_run_keys(fd: int, start: int, end: int) -> Iterator[str]:
    """The ``run_key`` of every whole line of the file ``fd`` that starts in [``start``, ``end``), read a
    :data:`_SCAN` at a time (a line longer than that is carried over).  ``start`` should be a line's
    start (else the line it falls in is skipped).  Raises OSError."""
    if start > 0:
        start -= 1  # the newline before the first line: run_keys skips up to it
    at_start = start == 0
    pos, carry = start, b""
    while pos < end:
        data = carry + os.pread(fd, min(_SCAN, end - pos), pos)
        if not data or len(data) == len(carry):
            return  # the file shrank under the scan
        pos += len(data) - len(carry)
        cut = data.rfind(b"\n") + 1
        if cut:
            yield from run_keys(data[:cut], at_start)
            at_start = True
        carry = data[cut:]


def _key_by_json(line: bytes) -> str:
    """The ``run_key`` of a line the json module reads (a path's ``\\udcXX`` escapes), else ""."""
    try:
        obj = json.loads(line)
    except ValueError:  # also UnicodeDecodeError
        return ""
    key = obj.get("run_key") if isinstance(obj, dict) else None
    return key if isinstance(key, str) else ""


def cut_torn_tail(fd: int, where: str) -> int:
    """Truncate the regular file ``fd`` back to just after its last newline; the bytes cut (0 if it ends with one).

    A file with no newline at all is cut to empty.  Logs a warning naming ``where`` and the count.
    Raises OSError when the file cannot be read or truncated.
    """
    size = os.fstat(fd).st_size
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            end = start + at + 1
            break
        end = start
    cut = size - end
    if cut:
        os.ftruncate(fd, end)
        log.warning("%s: cut %d bytes of a torn last line (a writer killed mid-line); the file ends at its "
                    "last whole line and that run is written again when it is read", where, cut)
    return cut


class WriteFailed(OSError):
    """:func:`append_whole` failed: ``done`` bytes had been taken, and ``kept`` says what became of the file."""

    def __init__(self, err: OSError, done: int, kept: str) -> None:
        super().__init__(err.errno, err.strerror or str(err))
        self.done = done
        self.kept = kept


def append_whole(fd: int, data: bytes, append: bool = True) -> int:
    """Write all of ``data`` at the end of the regular file ``fd`` (``append``: it is open ``O_APPEND``,
    else at its offset); the offset it starts at.  On an error (a full disk stops a write short) the
    file is truncated back to that offset and :class:`WriteFailed` raised."""
    start = os.lseek(fd, 0, os.SEEK_END if append else os.SEEK_CUR)
    done = 0
    try:
        while done < len(data):  # a short write is retried: the kernel then says why it stopped
            n = os.write(fd, data[done:])
            if n <= 0:
                raise OSError(errno.EIO, "write returned 0")
            done += n
    except OSError as err:
        try:
            os.ftruncate(fd, start)
            os.lseek(fd, start, os.SEEK_SET)
            kept = "the file is truncated back to its last whole line"
        except OSError as e:
            kept = f"and it could not be truncated back to its last whole line ({e.strerror or e})"
        raise WriteFailed(err, done, kept) from err
    return start


def key_hash(key: str) -> int:
    """The 64-bit hash the index keeps of a run key (any string: a host-log run's key holds its path)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big")


class KeyIndex:
    """Run keys written (their :func:`key_hash`), the newest ``kept``, in order; with a ``path``, kept on disk.

    The file is append-only whole lines, ``%016x %d\\n`` (hash, end of the events line in the events
    file; 0: the line is in a file rotated away); a torn or unreadable line is skipped when read.  A
    failed append (a full disk) is kept and written with the next one, so the last line's end never
    passes a line whose key is missing.
    """

    def __init__(self, kept: int = KEYS_KEPT) -> None:
        self.kept = kept
        self.hashes: dict[int, bool] = {}  # hash -> its events line is in the file at the path (False: rotated away)
        self.path: str | None = None
        self.fd = -1
        self.lines = 0  # lines in the file
        self.end: int | None = None  # where the last line kept ends in the events file (None: read it all)
        self.bad_lines = 0  # lines of the file that could not be read
        self.dropped = 0  # keys dropped at open: their lines ended past the end of the events file
        self._pending: list[bytes] = []  # lines not yet in the file (an append failed)
        self._failing: str | None = None
        self._compact_at = kept + kept // 2  # lines at which the file is rewritten with the keys kept

    def __contains__(self, key: str) -> bool:
        return key_hash(key) in self.hashes

    def __len__(self) -> int:
        return len(self.hashes)

    def _keep(self, h: int, here: bool) -> None:
        hashes = self.hashes
        hashes.pop(h, None)
        hashes[h] = here
        if len(hashes) > self.kept:
            del hashes[next(iter(hashes))]

    @classmethod
    def open(cls, path: str, kept: int = KEYS_KEPT, size: int | None = None) -> KeyIndex:
        """The index at ``path`` (created if missing).  One that cannot be opened is logged and replaced
        by one in memory (a restart then scans the whole events file).  ``size``: the events file's
        size; keys whose lines end past it are dropped (:attr:`dropped`, logged; the caller compacts)."""
        index = cls(kept)
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            log.error("%s: cannot open the events file's key index (%s); runs written are remembered in "
                      "memory only, and the next start reads the whole events file for them", path,
                      err.strerror or err)
            return index
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
            index._read(fd, size)
        except OSError as err:
            os.close(fd)
            log.error("%s: cannot read the events file's key index (%s); the whole events file is read for "
                      "its runs, and runs written are remembered in memory only", path, err.strerror or err)
            return cls(kept)
        index.path, index.fd = path, fd
        if index.bad_lines:
            log.warning("%s: %d unreadable line(s) skipped (a torn write, or damage); the whole events file is "
                        "read for its runs", path, index.bad_lines)
        if index.dropped:
            log.warning("%s: %d run key(s) dropped: their lines ended past the end of the events file (%d bytes; "
                        "its tail was lost or it was truncated); those runs are written again when read",
                        path, index.dropped, size)
        if index.lines > index._compact_at and not index.dropped:
            index.compact(index.end or 0)
        return index

    def _read(self, fd: int, size: int | None) -> None:
        data = b""
        length = os.fstat(fd).st_size
        while len(data) < length:
            chunk = os.pread(fd, length - len(data), len(data))
            if not chunk:
                break
            data += chunk
        lines = data.split(b"\n")
        if lines[-1]:
            self.bad_lines += 1  # a torn last line (a kill or a full disk mid-append): cut it
            os.ftruncate(fd, len(data) - len(lines[-1]))
        for line in lines[:-1]:
            h, _, text = line.partition(b" ")
            if len(h) != 16 or not text.isdigit():
                self.bad_lines += 1
                continue
            try:
                key = int(h, 16)
            except ValueError:
                self.bad_lines += 1
                continue
            self.lines += 1
            end = int(text)
            if size is not None and end > size:
                self.dropped += 1  # its line is gone from the events file: the run is to be written again
                continue
            self._keep(key, end > 0)
            self.end = end if self.end is None else max(self.end, end)
        if self.bad_lines:
            self.end = None  # an index with a bad line is not trusted to say where it ends: read the whole file

    def add(self, keys: Iterable[str], end: int) -> None:
        """Remember ``keys`` (written to the events file in lines that end by ``end``)."""
        lines = []
        for key in keys:
            h = key_hash(key)
            self._keep(h, True)
            lines.append(b"%016x %d\n" % (h, end))
        if not lines or self.fd < 0:
            return
        self._pending += lines
        data = b"".join(self._pending)
        try:
            append_whole(self.fd, data)
        except OSError as err:
            path = self.path
            if len(self._pending) > self.kept:  # the index cannot keep up: the next start reads the whole file
                self.give_up()
            text = f"{err.strerror or err}"
            if text != self._failing or self.fd < 0:
                self._failing = text
                log.error("%s: cannot append to the events file's key index (%s); %s", path, text,
                          "kept in memory and written with the next line" if self.fd >= 0 else
                          "it is given up: the next start reads the whole events file")
            return
        if self._failing is not None:
            log.warning("%s: the key index is written again", self.path)
            self._failing = None
        self.lines += len(self._pending)
        self.end = end
        self._pending.clear()
        if self.lines > self._compact_at:
            self.compact(end)

    def give_up(self) -> None:
        """Keep the keys in memory only and delete the file, so the next start reads the whole events file."""
        self._pending.clear()
        path, self.path = self.path, None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if path is not None:
            try:
                os.unlink(path)  # a stale index would make the next start skip the lines it lacks
            except OSError as err:
                log.error("%s: cannot remove the stale key index (%s); remove it by hand before the next start",
                          path, err.strerror or err)

    def rotated(self) -> None:
        """The events lines written so far are in a file rotated away (renamed, deleted, truncated under the
        sink): their keys are kept with the end 0, which no later truncation of the file at the path drops."""
        for h in self.hashes:
            self.hashes[h] = False
        self.end = 0
        self.compact(0)

    def compact(self, end: int) -> bool:
        """Rewrite the file with the keys kept (the newest ``kept``), each ending by ``end`` (0: its line is
        in a rotated file); atomically.  False when it could not be (logged).  (A later truncation below
        ``end`` drops them all at open; those whose lines are still there are found again by the scan.)"""
        if self.path is None or self._pending:
            return False
        data = b"".join(b"%016x %d\n" % (h, end if here else 0) for h, here in self.hashes.items())
        self._compact_at = self.lines + self.kept // 2  # if this fails, try again only that much later
        try:
            tfd = write_atomic_fd(self.path, data, mode=0o644)
        except OSError as err:
            log.warning("%s: cannot compact the key index (%s); it goes on growing", self.path, err.strerror or err)
            return False
        os.close(self.fd)
        os.lseek(tfd, 0, os.SEEK_END)
        fcntl.fcntl(tfd, fcntl.F_SETFL, fcntl.fcntl(tfd, fcntl.F_GETFL) | os.O_APPEND)
        self.fd, self.lines, self.end, self.bad_lines, self.dropped = tfd, len(self.hashes), end, 0, 0
        self._compact_at = self.kept + self.kept // 2
        return True

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class StdoutStream(io.FileIO):
    """``--events -``: standard output through a duplicate of fd 1, unbuffered and without a lock.

    A write blocked on a pipe nobody reads then holds no lock that the interpreter's exit needs
    (``sys.stdout.buffer``'s would abort the exit of a process that abandoned its events sink);
    :meth:`write` completes a short write, so a line is written whole or the write raises.
    """

    def __init__(self) -> None:
        super().__init__(os.dup(sys.stdout.fileno()), "w", closefd=True)

    def write(self, data: Buffer, /) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            n = super().write(view[done:])
            if n is None:  # a non-blocking descriptor that is full
                raise BlockingIOError(11, "standard output would block")
            done += n
        return done


class EventsSink(Sink):
    """Writes to ``stream`` (owned by the caller unless ``owns`` is set) through its file descriptor.

    ``stream`` must have a ``fileno()``; nothing is buffered in the sink or in ``stream``.  A sink made by
    :meth:`open` knows its path: it keeps the key index beside it and follows a rename of the file.
    """

    name = "events"
    wants = WANT_SUMMARIES

    def __init__(self, stream: IO[bytes], owns: bool = False, name: str = "") -> None:
        self._stream = stream
        self._owns = owns
        self._encoder = msgspec.json.Encoder()
        self._where = name or str(getattr(stream, "name", ""))
        self._path: str | None = None  # the events file's path (open() only): reopened when renamed away
        self._index = KeyIndex()  # the run keys written (with a file beside the events file: open() only)
        self._lock = threading.Lock()  # receive() and reopen() may come from different threads
        self._reopen_failing: str | None = None
        self.torn_bytes_cut = 0
        """Bytes of a torn last line :meth:`open` cut from the file (0: it ended with a whole line)."""
        self.torn_lines_cut = 0
        """Torn last lines :meth:`open` cut (0 or 1)."""
        self.reopened = 0
        """Times a new file was opened at the path (renamed away or deleted, or :meth:`reopen`)."""
        self._use(stream)

    def _use(self, stream: IO[bytes]) -> None:
        stream.flush()
        self._stream = stream
        self._fd = stream.fileno()
        st = os.fstat(self._fd)
        self._regular = stat.S_ISREG(st.st_mode)
        self._ident = (st.st_dev, st.st_ino)
        self._append = bool(fcntl.fcntl(self._fd, fcntl.F_GETFL) & os.O_APPEND)
        if not self._where:
            self._where = str(self._fd)

    @classmethod
    def open(cls, path: str, keys_kept: int = KEYS_KEPT) -> EventsSink:
        """The sink of an events file, opened for appending (created 0644 if missing; OSError if it cannot be).

        A regular file that does not end with a newline (a writer killed in the middle of a line
        longer than a page) is first cut back to its last newline (:func:`cut_torn_tail`; counted
        in :attr:`torn_bytes_cut` and :attr:`torn_lines_cut`).  The runs already written (the key
        index ``path + ".keys"``, and the ``run_key`` of the file's whole, readable lines past the
        index's last line) are not written again: a watcher killed between a run's line and its saved
        state, or restarted without its state, re-reads that run and its line would otherwise appear
        twice.  The run of a cut line is not remembered, so it is written again whole.
        """
        sink = cls(cls._open_stream(path), owns=True, name=path)
        sink._path = path
        if not sink._regular:
            return sink  # a FIFO or a device: nothing to cut or to read back
        try:
            size = sink._cut_torn()
            index = sink._index = KeyIndex.open(path + INDEX_SUFFIX, keys_kept, size)
            sink._read_back(index.end, size)
            if (index.bad_lines or index.dropped) and not index.compact(size) and index.dropped:
                index.give_up()  # lines of dropped keys must not stay in it: the next start reads the whole file
        except OSError:
            sink.close()
            raise
        return sink

    @staticmethod
    def _open_stream(path: str) -> IO[bytes]:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        return os.fdopen(fd, "ab", buffering=0)

    def _cut_torn(self) -> int:
        """Cut a torn tail (counted); the file's size then.  Raises OSError."""
        self.torn_bytes_cut = cut_torn_tail(self._fd, self._where)
        self.torn_lines_cut = int(self.torn_bytes_cut > 0)
        return os.fstat(self._fd).st_size

    def _read_back(self, indexed: int | None, size: int) -> None:
        """Remember the keys of the lines past ``indexed`` (where the index's last key kept ends; None: read
        it all) up to ``size``.  Raises OSError."""
        start = indexed if indexed is not None and indexed <= size else 0  # shorter: truncated or replaced
        keys = list(dict.fromkeys(scan_run_keys(self._fd, start, size)))
        if keys:
            self._index.add(keys, size)

    def receive(self, event: SinkEvent) -> None:
        if not isinstance(event, RunFinished):
            return
        keys = [k for k in (event.key, event.content_key) if k]  # "" is never remembered
        if any(k in self._index for k in keys):
            return  # a run in the file already (same file, same bytes, under this name or another) is not repeated
        obj = file_object(event)
        obj["reason"] = event.reason
        if event.key:
            obj["run_key"] = event.key
        try:
            line = self._encoder.encode(obj)
        except UnicodeEncodeError:
            # a string from a path that is not UTF-8 (os.fsdecode's lone surrogates): JSON \udcXX
            # escapes, so json.loads gives back the str and os.fsencode the original bytes
            line = json.dumps(obj, separators=(",", ":")).encode("ascii")
        with self._lock:
            self._follow_path()
            end = self._write(line + b"\n", event.source.path)
            if self._regular and self._index.end is not None and end - len(line) - 1 < self._index.end:
                self._index.rotated()  # the file was truncated under the sink (copytruncate): its lines are elsewhere
            if keys:
                self._index.add(keys, end)

    def _write(self, line: bytes, what: str) -> int:
        """Write ``line`` whole; where it ends in the file (0 for a stream)."""
        if not self._regular:  # a pipe or a terminal: the stream writes it all (or raises: the reader left)
            self._stream.write(line)
            self._stream.flush()
            return 0
        try:
            start = append_whole(self._fd, line, self._append)
        except WriteFailed as err:
            cut = f" after {err.done} of {len(line)} bytes" if err.done else ""
            raise OSError(err.errno, f"cannot write the event of {what} to {self._where}: {err.strerror or err}"
                                     f"{cut}; the line is dropped, {err.kept}") from err
        return start + len(line)

    def _follow_path(self) -> None:
        """Before a line: when the path names another file than the one open (renamed away, deleted), open it."""
        if self._path is None or not self._regular:
            return
        try:
            st = os.stat(self._path)
        except FileNotFoundError:
            self._reopen("renamed away or deleted")
            return
        except OSError:
            return  # cannot tell (EACCES on a directory above): go on writing where we are
        if (st.st_dev, st.st_ino) != self._ident:
            self._reopen("replaced (renamed away, and a new file put at the path)")

    def reopen(self) -> None:
        """Open the file at the events path again (SIGHUP after a rotation by rename); lines from now on go
        to the file at the path.  A sink not made by :meth:`open` ignores it.  Safe from any thread; never
        raises (a path that cannot be opened is logged and the open file kept)."""
        if self._path is None:
            return
        with self._lock:
            self._reopen("")

    def _reopen(self, why: str) -> None:
        assert self._path is not None
        try:
            stream = self._open_stream(self._path)
        except OSError as err:
            text = err.strerror or str(err)
            if text != self._reopen_failing:
                self._reopen_failing = text
                log.error("%s: cannot open it again (%s); events go on to the file it was opened as", self._path,
                          text)
            return
        self._reopen_failing = None
        old, ident = self._stream, self._ident
        try:
            self._use(stream)
            if self._regular:
                if self._ident != ident:
                    self._index.rotated()  # the lines written so far are in the file renamed away (or deleted)
                self._read_back(None, self._cut_torn())  # a new file is empty; one put there may hold runs
        except OSError as err:
            log.error("%s: cannot read the file opened again (%s); writing to it anyway", self._path,
                      err.strerror or err)
        if self._owns:
            with contextlib.suppress(OSError):
                old.close()
        self._owns = True
        self.reopened += 1
        if why:
            log.info("%s: the events file was %s; writing to a new file at the path", self._path, why)

    def flush(self, deadline: float) -> None:
        """Nothing is buffered: every line went to the kernel in :meth:`receive`."""

    def close(self) -> None:
        with self._lock:
            if self._owns:
                self._stream.close()
            self._index.close()
