"""The trace file: framed ``Trace.packet`` entries appended to ``<path>.tmp``, renamed to ``path``
when complete (atomic: ``path`` is never a partial trace).

With ``compress`` (the protobuf trace) batches are written as ``TracePacket.compressed_packets``
(a zlib-deflated ``Trace``: Perfetto's own packet compression, read by the trace processor), so
memory is O(batch), never O(trace); without it (chrome-json) the bytes are written as they are.
The deflate is ISA-L's (``isal_zlib``, a zlib stream any zlib reads): 4.3x zlib's speed at level 1
for 4% more bytes, where zlib's was as long as the encoding itself (docs/performance.md).
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import BinaryIO

from isal import isal_zlib

from ringtrace.files import replace_into
from ringtrace.sinks._varint import LEN, tag, varint

TRACE_PACKET = tag(1, LEN)  # Trace.packet = 1
PKT_COMPRESSED = tag(50, LEN)  # TracePacket.compressed_packets = 50


def field_bytes(field_tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return field_tag + varint(len(payload)) + payload


def framed(packet: bytes) -> bytes:
    """One ``Trace.packet`` entry."""
    return TRACE_PACKET + varint(len(packet)) + packet


class TraceFile:
    """A trace being written: ``parts`` collects framed packets; :meth:`spill` writes them out.

    Callers append framed packets to ``parts`` and call :meth:`spill` now and then; nothing is
    written to ``path`` itself until :meth:`commit`.  Used from one thread.

    * ``keep_open=False``: the temp file is opened only while a batch is appended (the dir
      sink: many runs may be open at once, and each would otherwise hold a file descriptor).
    * ``threaded=True``: full batches are deflated and written by a worker thread (the deflate
      releases the GIL, so this overlaps the encoding: ``convert`` on 100 MB takes 10% less
      wall time than with the deflate inline).  At most two batches
      wait for it; :meth:`flush`, :meth:`commit` and :meth:`abort` wait until it is done.

    Raises OSError from the file system (a worker's error at the next call); the sinks catch it.
    """

    def __init__(self, path: Path, compress: bool = True, batch: int = 256 << 10, level: int = 2,
                 keep_open: bool = True, threaded: bool = False) -> None:
        self.path = path
        self.tmp = path.with_suffix(path.suffix + ".tmp")
        self.compress = compress
        self.batch = batch
        self.level = level
        self.parts: list[bytes] = []
        self.raw_bytes = 0  # uncompressed framed bytes produced so far (for figures)
        self.written = 0  # bytes written to the file so far
        self._fh: BinaryIO | None = self.tmp.open("wb")
        if not keep_open:
            self._fh.close()
            self._fh = None
        self._error: Exception | None = None
        self._queue: queue.Queue[bytes | None] | None = None
        self._worker: threading.Thread | None = None
        if threaded:
            self._queue = queue.Queue(maxsize=2)
            self._worker = threading.Thread(target=self._work, name=f"deflate {path.name}", daemon=True)
            self._worker.start()

    def _write(self, data: bytes) -> None:
        self.raw_bytes += len(data)
        if self.compress:
            data = framed(field_bytes(PKT_COMPRESSED, isal_zlib.compress(data, self.level)))
        if self._fh is not None:
            self._fh.write(data)
        else:
            with self.tmp.open("ab") as fh:
                fh.write(data)
        self.written += len(data)

    def _work(self) -> None:
        assert self._queue is not None
        while True:
            data = self._queue.get()
            try:
                if data is None:
                    return
                if self._error is None:
                    self._write(data)
            except Exception as err:  # kept, raised on the caller's thread; the worker keeps draining
                self._error = err
            finally:
                self._queue.task_done()

    def _check(self) -> None:
        if self._error is not None:
            raise self._error

    def spill(self, force: bool = False) -> None:
        """Write the collected packets once they reach ``batch`` bytes (or now, with ``force``)."""
        parts = self.parts
        if not parts:
            return
        size = sum(map(len, parts))
        if size < self.batch and not force:
            return
        data = b"".join(parts)
        parts.clear()
        if self._queue is not None:
            self._check()
            self._queue.put(data)
        else:
            self._write(data)

    def _drain(self) -> None:
        if self._queue is not None:
            self._queue.join()
            self._check()

    def _stop(self) -> None:
        if self._queue is not None and self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._queue = None

    def flush(self) -> None:
        self.spill(force=True)
        self._drain()
        if self._fh is not None:
            self._fh.flush()

    def commit(self) -> None:
        """Write everything, close, and atomically rename the temp file to ``path``."""
        try:
            self.flush()
        finally:
            self._stop()
        if self._fh is not None:
            self._fh.close()
        replace_into(self.tmp, self.path)

    def abort(self) -> None:
        """Stop writing, close and remove the temp file (``path`` is left untouched)."""
        self.parts.clear()
        try:
            self._stop()
            if self._fh is not None:
                self._fh.close()
        finally:
            self.tmp.unlink(missing_ok=True)
