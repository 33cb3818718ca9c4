"""Brute-force oracles for paired scopes (what the pairer computes incrementally, recomputed naively)."""

from __future__ import annotations

import msgspec

from ringtrace.model.records import (
    Scope,
)
from ringtrace.sinks.otlp._select import METRICS


def mark_peaks(scopes: list[Scope]) -> list[Scope]:
    """``scopes`` (in the order they ended) with ``sets`` by brute force: per (ring, resource, metric)
    the running maximum, the first scope reaching it sets the bit (the pairer's rule, :attr:`Scope.sets`)."""
    best: dict[tuple[int, int, int], int] = {}
    out = []
    for sc in scopes:
        sets = 0
        for r, usage in enumerate(sc.usage):
            if usage is None:
                continue
            for m, name in enumerate(METRICS):
                v = getattr(usage, name)
                key = (sc.ring, r, m)
                if key not in best or v > best[key]:
                    best[key] = v
                    sets |= 1 << (3 * r + m)
        out.append(msgspec.structs.replace(sc, sets=sets))
    return out
