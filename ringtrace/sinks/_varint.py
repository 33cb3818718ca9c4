"""Protobuf base-128 varints and field tags, shared by the hand-written Perfetto and OTLP encoders.  Pure.

Each encoder names its field tags once, at import, as module constants: ``tag(field, wire_type)``.
"""

from __future__ import annotations

_MASK64 = (1 << 64) - 1


SMALL: tuple[bytes, ...] = tuple([bytes((i,)) for i in range(1 << 7)]
                                 + [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(1 << 7, 1 << 14)])
"""Encoded varints of 0..16383 (1 or 2 bytes), the common case."""
CONT: tuple[bytes, ...] = tuple([bytes(((i & 0x7F) | 0x80, (i >> 7) | 0x80)) for i in range(1 << 14)])
"""14 low bits of a longer varint: two bytes, both with the continuation bit."""


def varint(n: int) -> bytes:
    """Base-128 varint of an int64/uint64; negatives as 64-bit two's complement (10 bytes)."""
    if 0 <= n < 16384:
        return SMALL[n]
    if n < 0:
        n &= _MASK64
    out = CONT[n & 16383]
    n >>= 14
    while n >= 16384:
        out += CONT[n & 16383]
        n >>= 14
    return out + SMALL[n]


VARINT, I64, LEN, I32 = 0, 1, 2, 5
"""Protobuf wire types."""


def tag(field: int, wire_type: int) -> bytes:
    """The encoded key of field number ``field`` with ``wire_type`` (``(field << 3) | wire_type``)."""
    return varint((field << 3) | wire_type)
