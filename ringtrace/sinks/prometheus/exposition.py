"""An exposition handed out in pieces (:class:`Chunks`): what ``PrometheusSink.chunks`` gives the server.

10,000 finished rank files make ~30 MB of text; joined into one body (and copied again into the
socket's buffer) it would cost its size twice at every scrape.  Pieces of about :data:`CHUNK` bytes are
made as they are sent (or compressed), so a scrape holds one piece at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator

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
