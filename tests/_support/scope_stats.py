"""Build scope_stats lines as the runtime writes them, and read them back through decode and pair.

* :func:`meta` / :func:`rec` — metadata and record dicts in the runtime's key order;
  :func:`with_totals` prefixes records with a metadata line whose ``total`` counts them.
* :func:`encode_lines` — dicts JSON-encoded as the runtime does, ``str``/``bytes`` lines verbatim.
* :func:`read_bytes` / :func:`read_lines` — decode and pair in memory as ``Run`` does, split by kind
  in a :class:`Decoded` (no file, no clock).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ringtrace.model.records import Meta, PairEvent, Problem, Record, RunSummary
from ringtrace.stages.decode import Decoder, Item
from ringtrace.stages.pair import Pairer

Line = dict[str, Any] | str | bytes


WriteJsonl = Callable[..., Path]


def encode_lines(lines: Iterable[Line], newline: bytes = b"\n", final_newline: bool = True) -> bytes:
    """Dicts as the runtime writes them (``json.dumps`` with ", " / ": "), str/bytes verbatim."""
    parts: list[bytes] = []
    for line in lines:
        if isinstance(line, dict):
            parts.append(json.dumps(line).encode())
        elif isinstance(line, str):
            parts.append(line.encode())
        else:
            parts.append(line)
    data = newline.join(parts)
    return data + newline if final_newline and parts else data


def meta(version: int = 6, *, fatal: bool = False, dropped: int = 0, total: int | None = None,
         task_window: int | Sequence[int] = 16, heap: int | Sequence[int] = 1024,
         dep_pool: int | Sequence[int] = 64, tensormap: int = 100, **extra: Any) -> dict[str, Any]:
    """A metadata line; capacities are broadcast to 4 rings when given as one number."""

    def four(x: int | Sequence[int]) -> list[int]:
        return [x] * 4 if isinstance(x, int) else list(x)

    m: dict[str, Any] = {"version": version, "fatal": fatal, "dropped": dropped}
    if total is not None:
        m["total"] = total
    m["task_window_max"] = four(task_window)
    m["heap_max"] = four(heap)
    if version >= 5:
        m["dep_pool_max"] = four(dep_pool)
    m["tensormap_max"] = tensormap
    m.update(extra)
    return m


def rec(site: str, phase: str, depth: int, *, ring: int | None = None, tw: tuple[int, int] = (0, 0),
        heap: tuple[int, int] = (0, 0), dp: tuple[int, int] | None = (1, 1), tm: int = 0,
        **extra: Any) -> dict[str, Any]:
    """A record; ``tw``/``heap``/``dp`` are (start, end) = (tail, head); ``dp=None`` leaves it out (v4)."""
    r: dict[str, Any] = {"site": site, "phase": phase, "depth": depth,
                         "ring": min(depth, 3) if ring is None else ring,
                         "task_window_start": tw[0], "task_window_end": tw[1],
                         "heap_start": heap[0], "heap_end": heap[1]}
    if dp is not None:
        r["dep_pool_start"], r["dep_pool_end"] = dp
    r["tensormap"] = tm
    r.update(extra)
    return r


def with_totals(lines: list[dict[str, Any]], **meta_kw: Any) -> list[Line]:
    """Prefix ``lines`` with a metadata line whose ``total`` counts them (plus ``dropped``)."""
    dropped = int(meta_kw.get("dropped", 0))
    return [meta(total=len(lines) + dropped, **meta_kw), *lines]


class Decoded:
    """Everything one byte string produced, split by kind."""

    def __init__(self, items: list[Item], events: list[PairEvent], decoder: Decoder, pairer: Pairer) -> None:
        self.items = items
        self.events = events
        self.decoder = decoder
        self.pairer = pairer
        self.meta: Meta | None = decoder.meta
        self.records = [i for i in items if isinstance(i, Record)]
        self.problems = [i for i in items if isinstance(i, Problem)]
        self.errors = [p for p in self.problems if p.severity == "error"]
        self.warnings = [p for p in self.problems if p.severity == "warning"]

    @property
    def summary(self) -> RunSummary:
        return self.pairer.summary(self.decoder.parse_errors, finished=True)

    def reasons(self) -> list[str]:
        return [p.reason for p in self.problems]


def read_bytes(data: bytes, chunks: Sequence[int] = ()) -> Decoded:
    """Decode ``data`` (split at the offsets in ``chunks``) and pair it, as ``Run`` does."""
    dec = Decoder()
    pairer = Pairer()
    items: list[Item] = []
    events: list[PairEvent] = []
    cuts = [0, *sorted(chunks), len(data)]
    for a, b in itertools.pairwise(cuts):
        items.extend(dec.feed(data[a:b]))
    items.extend(dec.finish())
    for item in items:
        if isinstance(item, Meta):
            pairer.meta = item
        elif isinstance(item, Record):
            events.extend(pairer.push(item))
    return Decoded(items, events, dec, pairer)


def read_lines(lines: Sequence[Line], **kw: Any) -> Decoded:
    return read_bytes(encode_lines(lines, **kw))
