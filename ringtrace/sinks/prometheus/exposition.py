"""An exposition handed out in pieces (:class:`Chunks`): what ``PrometheusSink.chunks`` gives the server.

10,000 finished rank files make ~30 MB of text; joined into one body (and copied again into the
socket's buffer) it would cost its size twice at every scrape.  Pieces of about :data:`CHUNK` bytes are
made as they are sent (or compressed), so a scrape holds one piece at a time.

The layout, in one place: :func:`pieces` (each family's ``# HELP``/``# TYPE`` head, cut by
:func:`family_heads`, then the packed segments' lines, then the open runs'; the exporter's own families
last) and :func:`gz_parts`, the same as deflate streams for the stitched gzip.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from operator import itemgetter

from ringtrace.sinks.prometheus._segments import Packed, Part, deflate, inflate

CHUNK = 256 * 1024
"""About how many bytes one piece holds."""


class Chunks:
    """The pieces of one exposition, made as they are taken (an iterator; take it from one thread at a time).

    ``key``: two expositions with equal keys have the same bytes (the server reuses the gzip of the last
    one); None: no such promise.  ``gzipped``: makes the exposition's gzip without the pieces (the sink
    stitches it from what it keeps compressed); None: the server compresses the pieces."""

    def __init__(self, pieces: Iterator[bytes], key: Hashable | None = None,
                 gzipped: Callable[[], bytes] | None = None) -> None:
        self._pieces = pieces
        self.key = key
        self.gzipped = gzipped

    def __iter__(self) -> Iterator[bytes]:
        return self._pieces

    def __next__(self) -> bytes:
        return next(self._pieces)


def grouped(pieces: Iterator[bytes], size: int = CHUNK) -> Iterator[bytes]:
    """``pieces`` joined into chunks of at least ``size`` bytes (the last one may be smaller)."""
    buf: list[bytes] = []
    held = 0
    for piece in pieces:
        buf.append(piece)
        held += len(piece)
        if held >= size:
            yield b"".join(buf)
            buf, held = [], 0
    if buf:
        yield b"".join(buf)


def pieces(heads: list[bytes], packed: list[Packed], rows: list[tuple[bytes, ...]], own: bytes) -> Iterator[bytes]:
    """Each family's head, its lines from the packed segments and from ``rows`` (one tuple a run), then the
    own families, in chunks of about :data:`CHUNK` bytes made as they are taken."""
    return grouped(_pieces(heads, packed, rows, own))


def _pieces(heads: list[bytes], packed: list[Packed], rows: list[tuple[bytes, ...]], own: bytes) -> Iterator[bytes]:
    for i, head in enumerate(heads):
        yield head
        yield from filter(None, (inflate(parts[i]) for parts in packed))
        yield from filter(None, map(itemgetter(i), rows))
    yield own


def gz_parts(heads: list[Part], packed: list[Packed], rows: list[tuple[bytes, ...]], own: bytes) -> Iterator[Part]:
    """:func:`pieces` as deflate streams: the packed segments' as they are, the rest compressed now."""
    for i, head in enumerate(heads):
        yield head
        yield from (parts[i] for parts in packed)
        yield deflate(b"".join(filter(None, map(itemgetter(i), rows))))
    yield deflate(own)


def family_heads(body: bytes) -> list[bytes]:
    """The ``# HELP``/``# TYPE`` lines of an exposition of empty families, one bytes per family."""
    chunks: list[bytes] = []
    for line in body.splitlines(keepends=True):
        if line.startswith(b"# HELP ") or not chunks:
            chunks.append(line)
        elif line != b"# EOF\n":
            chunks[-1] += line
    return chunks
