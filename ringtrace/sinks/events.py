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
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
from typing import IO

import msgspec

from ringtrace.records import WANT_SUMMARIES, RunFinished, SinkEvent
from ringtrace.sinks.summary import file_object

TAIL_BYTES = 1 << 20
"""How much of an existing events file is read for the runs it holds."""
KEYS_KEPT = 10_000
_CHUNK = 1 << 16
"""How much is read at a time when looking back for the last newline of a torn file."""

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


class EventsSink:
    """Writes to ``stream`` (owned by the caller unless ``owns`` is set) through its file descriptor.

    ``stream`` must have a ``fileno()``; nothing is buffered in the sink or in ``stream``.
    """

    name = "events"
    wants = WANT_SUMMARIES

    def __init__(self, stream: IO[bytes], owns: bool = False, name: str = "") -> None:
        self._stream = stream
        self._owns = owns
        self._encoder = msgspec.json.Encoder()
        stream.flush()
        self._fd = stream.fileno()
        self._regular = stat.S_ISREG(os.fstat(self._fd).st_mode)
        self._append = bool(fcntl.fcntl(self._fd, fcntl.F_GETFL) & os.O_APPEND)
        self._where = name or str(getattr(stream, "name", self._fd))
        self._keys: dict[str, None] = {}  # run keys written (the newest KEYS_KEPT), in order
        self.torn_bytes_cut = 0
        """Bytes of a torn last line :meth:`open` cut from the file (0: it ended with a whole line)."""
        self.torn_lines_cut = 0
        """Torn last lines :meth:`open` cut (0 or 1)."""

    @classmethod
    def open(cls, path: str) -> EventsSink:
        """The sink of an events file, opened for appending (created 0644 if missing; OSError if it cannot be).

        A regular file that does not end with a newline (a writer killed in the middle of a line
        longer than a page) is first cut back to its last newline (:func:`cut_torn_tail`; counted
        in :attr:`torn_bytes_cut` and :attr:`torn_lines_cut`).  The runs already in the file (the
        ``run_key`` of its whole, readable lines in the last :data:`TAIL_BYTES`) are not written
        again: a watcher killed between a run's line and its saved state, then restarted, re-reads
        that run and its line would otherwise appear twice.  The run of a cut line is not
        remembered, so it is written again whole when it is read again.
        """
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        sink = cls(os.fdopen(fd, "ab", buffering=0), owns=True, name=path)
        if not sink._regular:
            return sink  # a FIFO or a device: nothing to cut or to read back
        try:
            sink.torn_bytes_cut = cut_torn_tail(fd, path)
            sink.torn_lines_cut = int(sink.torn_bytes_cut > 0)
            size = os.fstat(fd).st_size
            n = min(size, TAIL_BYTES + 1)  # one byte more: the window's first line is whole when it follows a newline
            for key in run_keys(os.pread(fd, n, size - n), at_start=n == size):
                sink._remember(key)
        except OSError:
            sink.close()
            raise
        return sink

    def _remember(self, key: str) -> None:
        self._keys[key] = None
        if len(self._keys) > KEYS_KEPT:
            del self._keys[next(iter(self._keys))]

    def receive(self, event: SinkEvent) -> None:
        if not isinstance(event, RunFinished) or event.key in self._keys:
            return  # a run in the file already (same file, same bytes; "" is never remembered) is not repeated
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
        self._write(line + b"\n", event.source.path)
        if event.key:
            self._remember(event.key)

    def _write(self, line: bytes, what: str) -> None:
        fd = self._fd
        if not self._regular:  # a pipe or a terminal: the stream writes it all (or raises: the reader left)
            self._stream.write(line)
            self._stream.flush()
            return
        start = os.lseek(fd, 0, os.SEEK_END if self._append else os.SEEK_CUR)
        done = 0
        try:
            while done < len(line):  # a short write is retried: the kernel then says why it stopped
                n = os.write(fd, line[done:])
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
            cut = f" after {done} of {len(line)} bytes" if done else ""
            raise OSError(err.errno, f"cannot write the event of {what} to {self._where}: {err.strerror or err}"
                                     f"{cut}; the line is dropped, {kept}") from err

    def flush(self) -> None:
        """Nothing is buffered: every line went to the kernel in :meth:`receive`."""

    def close(self) -> None:
        if self._owns:
            self._stream.close()
