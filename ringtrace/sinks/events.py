"""The events sink: one JSON line per finished run (the summary's file object + ``reason``).

Every line is written whole or not at all: it is built in memory and handed to the kernel in
one ``os.write`` on the stream's file descriptor (``O_APPEND``, as :meth:`EventsSink.open` and
Python's ``"ab"`` open it).  When a regular file takes only part of a line (a full disk) or the
write fails, the file is truncated back to where the line started and the error is raised to the
:class:`~ringtrace.sinks.FanOut`, which logs and counts it: that run's line is lost, the file holds
only whole lines.  Pipes and terminals (``--events -``) cannot be truncated; there the stream
completes short writes itself.  A string that still holds surrogate escapes (a path that is not
UTF-8) is written as JSON ``\\udcXX`` escapes rather than losing the line.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import stat
from typing import IO

import msgspec

from ringtrace.records import WANT_SUMMARIES, RunFinished, SinkEvent
from ringtrace.sinks.summary import file_object

TAIL_BYTES = 1 << 20
"""How much of an existing events file is read for the runs it holds."""
KEYS_KEPT = 10_000
_RUN_KEY = re.compile(rb'"run_key":"([0-9a-f]+)"')


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

    @classmethod
    def open(cls, path: str) -> EventsSink:
        """The sink of an events file, opened for appending (created 0644 if missing; OSError if it cannot be).

        The runs already in the file (the ``run_key`` of its last lines) are not written again: a
        watcher killed between a run's line and its saved state, then restarted, re-reads that run
        and its line would otherwise appear twice.
        """
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        sink = cls(os.fdopen(fd, "ab", buffering=0), owns=True, name=path)
        size = os.fstat(fd).st_size
        n = min(size, TAIL_BYTES)
        for key in _RUN_KEY.findall(os.pread(fd, n, size - n)):
            sink._remember(key.decode())
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
