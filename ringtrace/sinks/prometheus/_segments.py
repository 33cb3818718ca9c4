"""Finished runs' exposition lines, packed: what 10,000 finished rank files cost in memory and per scrape.

Finished runs are kept in :class:`Segment` s of up to :data:`SEG_RUNS` runs in finish order.  A segment
holds, per family, its runs' lines as one raw deflate stream ended by a sync flush (byte aligned, no
history before it), with the text's CRC-32 and length: about 30 times smaller than the text (10,000 L3
ranks: ~1 MB for 30 MB of lines).  A segment is packed when it fills, and again (at the next scrape) when
runs left it (expired, dropped, replaced); a run still in the newest segment keeps its lines until then.

A scrape that asks for gzip is stitched from these streams (:func:`gzip_of`: a gzip header, the streams,
a final empty block, the CRC combined): only what changed since the last scrape is compressed again.  An
uncompressed scrape inflates each segment's streams as it is sent.  Not thread-safe: the sink's lock guards
every call.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from isal import isal_zlib

SEG_RUNS = 256
"""Runs a segment holds: a new finish recompresses at most this many runs' lines (~0.8 MB, ~2 ms)."""
LEVEL = 2
_GZIP_HEAD = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, no time, OS unknown
_END = isal_zlib.compressobj(LEVEL, isal_zlib.DEFLATED, -15).flush()  # a final empty block

Part = tuple[bytes, int, int]
"""One raw deflate stream (sync flushed, no history): (stream, CRC-32 of its text, its text's length)."""
EMPTY: Part = (b"", 0, 0)
Packed = list[Part]
"""A segment's families, packed."""


def deflate(text: bytes) -> Part:
    if not text:
        return EMPTY
    comp = isal_zlib.compressobj(LEVEL, isal_zlib.DEFLATED, -15)
    return comp.compress(text) + comp.flush(isal_zlib.Z_SYNC_FLUSH), isal_zlib.crc32(text), len(text)


def inflate(part: Part) -> bytes:
    """The text of ``part`` (a stream without its final block: a decompressor, not ``decompress``)."""
    return isal_zlib.decompressobj(-15).decompress(part[0]) if part[2] else b""


def gzip_of(parts: Iterable[Part]) -> bytes:
    """One gzip member of the texts of ``parts``, in order, from their streams (nothing compressed again)."""
    out, crc, size = [_GZIP_HEAD], 0, 0
    for stream, part_crc, n in parts:
        if n:
            out.append(stream)
            crc = isal_zlib.crc32_combine(crc, part_crc, n)
            size += n
    out.append(_END)
    out.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return b"".join(out)


class Packable(Protocol):
    """A finished run as a segment keeps it."""

    lines: tuple[bytes, ...] | None  # its lines, one bytes per family, until its segment packs them
    sizes: tuple[int, ...]  # the length of each family's lines
    dead: bool  # it left: its lines go at the next pack


@dataclass(slots=True, eq=False)
class Segment:
    """Up to :data:`SEG_RUNS` finished runs, in finish order, and their lines packed per family."""

    families: int
    runs: list[Packable] = field(default_factory=list)  # packed runs first (lines None), then new ones
    parts: list[Part] | None = None  # per family; None: nothing packed yet
    dirty: bool = False  # runs came or left since the last pack

    def add(self, run: Packable) -> None:
        self.runs.append(run)
        self.dirty = True

    @property
    def full(self) -> bool:
        return len(self.runs) >= SEG_RUNS

    def lines(self) -> Iterator[tuple[Packable, tuple[bytes, ...]]]:
        """Every live run with its lines, in order."""
        texts = [inflate(p) for p in self.parts] if self.parts is not None else []
        at = [0] * self.families
        for run in self.runs:
            got = run.lines
            if got is None:  # packed: cut from the texts
                got = tuple(texts[i][at[i]:at[i] + n] for i, n in enumerate(run.sizes))
                at = [a + n for a, n in zip(at, run.sizes, strict=True)]
            if not run.dead:
                yield run, got

    def pack(self) -> None:
        """Pack the live runs' lines (when runs came or left); the runs drop their own copies."""
        if not self.dirty:
            return
        got = list(self.lines())
        self.parts = [deflate(b"".join(lines[i] for _, lines in got)) for i in range(self.families)]
        self.runs = [run for run, _ in got]
        for run in self.runs:
            run.lines = None
        self.dirty = False

    def text(self, family: int) -> bytes:
        """The family's lines of the (packed) segment."""
        assert self.parts is not None and not self.dirty
        return inflate(self.parts[family])
