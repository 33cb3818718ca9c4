"""A run's records and pair events -> one track-event packet per record: the trace writer's hot path.

:func:`write` is what :class:`~._trace_writer.ProtoTrace` calls.  :func:`encode` is the reference
(pure Python); ``_encode.c`` (module ``_encode``) is its compiled twin, used where it was built unless
``RINGTRACE_PURE=1``.  The twin writes the records it can (ints within int64, rings and sites already
known, no abandoned scope) and stops at the first it cannot; :func:`encode` writes that record and the
twin goes on after it, so the packets are the reference's in every case, byte for byte
(tests/sinks/perfetto/test_encode.py).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Protocol

from ringtrace.config import pure_path
from ringtrace.model.records import Abandoned, OpenScope, PairEvent, Record, Scope, UnmatchedEnd, Usage
from ringtrace.model.runtime import TABLE as RESOURCE_TABLE
from ringtrace.model.runtime import unrolled
from ringtrace.sinks._varint import varint

from ._file import TRACE_PACKET
from ._layout import RingState, RunState, event_line, present
from ._wire import (
    ANN_PREFIXES,
    BEGIN,
    COUNTER_EVENT,
    END,
    EV_EXTRA_VALUE,
    IID_DEPTH,
    IID_LINE,
    IID_UNMATCHED,
    IID_USAGE,
    PACKET_FIXED,
    PKT_TIMESTAMP,
    PKT_TRACK_EVENT,
    TABLE,
    ann,
    ann_tables,
    end_template,
    usage_args,
)

BUILT = importlib.util.find_spec(f"{__package__}._encode") is not None
"""The compiled twin was built (where the install had no C compiler it was not).  Found, not loaded: it is loaded
where records are first written through it (:func:`twin`), so the pure path never loads it."""


@functools.cache
def twin() -> ModuleType | None:
    """The compiled twin, loaded and given the types it reads, once; None where they cannot be bound."""
    from . import _encode

    try:
        _encode.bind(Record=Record, Scope=Scope, Usage=Usage, Abandoned=Abandoned, UnmatchedEnd=UnmatchedEnd)
    except TypeError:  # pragma: no cover - a msgspec that keeps fields elsewhere than in member slots
        return None
    return _encode


COMPILED = BUILT and not pure_path() and twin() is not None
"""Records are written by the compiled twin (the default where it was built); ``RINGTRACE_PURE=1``: :func:`encode`."""


class Writer(Protocol):
    """What the hot path asks of the trace writer: the rare packets."""

    def new_ring(self, run: RunState, rec: Record) -> RingState:
        """A ring's first record: its sequence and tracks (descriptors appended to the parts)."""

    def intern(self, ring: RingState, site: str) -> tuple[bytes, bytes]:
        """A new site on ``ring``: its encoded ``name_iid`` field and the ``interned_data`` field to add."""

    def end(self, run: RunState, scope: OpenScope, at: int, flag_iid: int) -> None:
        """End ``scope``'s slice at ``at`` with the bool annotation ``flag_iid`` (0: none)."""


def write(w: Writer, parts: list[bytes], run: RunState, records: Sequence[Record], events: Sequence[PairEvent],
          compiled: bool = COMPILED) -> None:
    """Append the packets of ``records`` (one each, in order) and of ``events`` (the pair events of the same
    records, in record order) to ``parts``; ``compiled``: through the twin (RuntimeError where it was not built)."""
    n = len(records)
    module = twin() if compiled and BUILT else None
    if compiled and module is None:
        raise RuntimeError("the compiled Perfetto encoder was not built (no C compiler at install)")
    if module is None or not n:
        encode(w, parts, run, records, events, 0, 0, n)
        return
    fast = module.encode
    rings, tm = run.rings, run.tm_uuid
    i, ei = fast(parts, rings, tm, records, events, 0, 0)
    while i < n:
        ei = encode(w, parts, run, records, events, i, ei, i + 1)
        i, ei = fast(parts, rings, tm, records, events, i + 1, ei)


def counters(rec: Record, ring: RingState) -> tuple[bytes, bytes]:
    """The extra counter values of ``rec`` on ``ring``: the present resources' head - tail, then their use % (when
    the ring knows every capacity).  :func:`encode`'s path for a ring that lacks a resource (a v4 file's dep pool)."""
    xs = [(getattr(rec, RESOURCE_TABLE[i].end_field) or 0) - (getattr(rec, RESOURCE_TABLE[i].start_field) or 0)
          for i in ring.present]
    vals = b"".join(EV_EXTRA_VALUE + varint(x) for x in xs)
    caps = ring.caps
    pct = b"".join(EV_EXTRA_VALUE + varint(100 * x // c) for x, c in zip(xs, caps, strict=True)) if caps else b""
    return vals, pct


def _encode_source(present: tuple[int, ...]) -> str:
    """The source of :func:`encode` for rings whose records carry the resources ``present`` (indices in the table;
    a v4 file's lack the dep pool), each one's counter and usage figures written out: ``x{i}`` its head - tail,
    ``v{3i+f}`` the field of its usage figure ``f``.  A ring that carries others, and a scope whose usage has
    others, take the general path (:func:`counters`, :func:`~._wire.usage_args`): the same bytes."""
    n = range(len(RESOURCE_TABLE))
    figures = [3 * i + f for i in present for f in range(3)]
    xs = "".join(f"            x{i} = rec.{RESOURCE_TABLE[i].end_field} - rec.{RESOURCE_TABLE[i].start_field}\n"
                 if not RESOURCE_TABLE[i].optional else
                 f"            x{i} = (rec.{RESOURCE_TABLE[i].end_field} or 0) - "
                 f"(rec.{RESOURCE_TABLE[i].start_field} or 0)\n" for i in present)
    vals = ", ".join(f"EV_EXTRA_VALUE, varint(x{i})" for i in present)
    pct = ", ".join(f"EV_EXTRA_VALUE, varint(100 * x{i} // caps[{k}])" for k, i in enumerate(present))
    us = ", ".join(f"u{i}" for i in n)
    other = " or ".join(f"u{i} is None" if i in present else f"u{i} is not None" for i in n)
    vs = "".join(f"""\
                x = u{f // 3}.{("high_water", "live_at_exit", "alloc")[f % 3]}
                v{f} = T{f}[x] if 0 <= x < TABLE else ann(P{f}, x)
""" for f in figures)
    tables = "".join(f"    T{f}, P{f} = tables[IID_USAGE + {f}], ANN_PREFIXES[IID_USAGE + {f}]\n" for f in figures)
    return f"""
def encode(w, parts, run, records, events, i, ei, stop):
    if i >= stop:
        return ei
    app = parts.append
    rings = run.rings
    ne = len(events)
    ev_line = event_line(events[ei]) if ei < ne else -1
    join = b"".join
    a_depth, a_line = ANN_PREFIXES[IID_DEPTH], ANN_PREFIXES[IID_LINE]
    tables = ann_tables()
    T_DEPTH = tables[IID_DEPTH]
{tables}    last_r = records[i].ring
    ring = rings.get(last_r) or w.new_ring(run, records[i])
    fast = ring.present == PRESENT
    for k in range(i, stop):
        rec = records[k]
        line = rec.line
        r = rec.ring
        if r != last_r:
            ring = rings.get(r) or w.new_ring(run, rec)
            last_r = r
            fast = ring.present == PRESENT
        closing = None
        if line == ev_line:
            while True:
                pe = events[ei]
                if isinstance(pe, Scope):
                    closing = pe
                elif isinstance(pe, Abandoned):
                    w.end(run, pe.scope, line, IID_UNMATCHED)
                ei += 1
                ev_line = event_line(events[ei]) if ei < ne else -1
                if ev_line != line:
                    break
        caps = ring.caps
        if fast:
{xs}            vals = join(({vals}))
            pct = join(({pct})) if caps else b""
        else:
            vals, pct = counters(rec, ring)
        x = rec.tensormap
        vt = varint(x)
        vtp = vt + pct  # the tensormap's value, then the use-% values (the defaults' counter order)
        ts = varint(line)
        if rec.phase == "begin":
            site = rec.site
            iid = ring.names.get(site)
            interned = b""
            if iid is None:
                iid, interned = w.intern(ring, site)
            te = BEGIN % (iid, vals, vtp)
        elif closing is not None and closing.begin_ring is None:
            interned = b""
            x = closing.begin_line
            b = varint(x)
            x = closing.depth
            a = T_DEPTH[x] if 0 <= x < TABLE else ann(a_depth, x)
            {us}, = closing.usage
            if {other}:  # not the usage of these resources (not from the pairer, odd data)
                te = join((END, vals, EV_EXTRA_VALUE, vtp, a, a_line[len(b)], b, usage_args(closing)))
            else:
{vs}                te = END_T % (vals, vtp, a, a_line[len(b)], b, {", ".join(f"v{f}" for f in figures)})
        else:
            interned = b""
            if closing is not None:  # its begin is on another ring (odd data): end it there
                w.end(run, OpenScope(closing.site, closing.depth, closing.begin_ring or 0, closing.begin_line),
                      line, 0)
            te = COUNTER_EVENT % (varint(run.tm_uuid), vt, ring.extra + ring.pct_extra, vals + pct)
        n = len(te)
        lte = varint(n)
        n += PACKET_FIXED + len(ts) + ring.seq_len + len(lte) + len(interned)
        app(join((TRACE_PACKET, varint(n), PKT_TIMESTAMP, ts, ring.seq, PKT_TRACK_EVENT, lte, te, interned)))
    return ei
"""


def encode(w: Writer, parts: list[bytes], run: RunState, records: Sequence[Record], events: Sequence[PairEvent],
           i: int, ei: int, stop: int) -> int:
    """The packets of ``records[i:stop]`` (``events[ei:]`` are the pair events from ``records[i]`` on); returns the
    index of the first event after them.

    The hot loop (:func:`_encode_source`, compiled at the first call): whole annotation fields of small values
    come from tables, everything is local.  The pair events are in record order and each names the line of the
    record that caused it, so the two lists are merged in one pass; a closing :class:`Scope` ends the top slice of
    its track."""
    if i >= stop:
        return ei
    done: int = _unrolled_encode(present(records[i]))(w, parts, run, records, events, i, ei, stop)
    return done


@functools.cache
def _unrolled_encode(carried: tuple[int, ...]) -> Callable[..., int]:
    """:func:`_encode_source`'s ``encode`` for rings that carry ``carried``, compiled once."""
    made: Callable[..., int] = unrolled(_encode_source(carried), {
        "ANN_PREFIXES": ANN_PREFIXES, "BEGIN": BEGIN, "COUNTER_EVENT": COUNTER_EVENT, "END": END,
        "END_T": end_template(3 * len(carried)), "EV_EXTRA_VALUE": EV_EXTRA_VALUE, "IID_DEPTH": IID_DEPTH,
        "IID_LINE": IID_LINE, "IID_UNMATCHED": IID_UNMATCHED, "IID_USAGE": IID_USAGE, "PACKET_FIXED": PACKET_FIXED,
        "PKT_TIMESTAMP": PKT_TIMESTAMP, "PKT_TRACK_EVENT": PKT_TRACK_EVENT, "PRESENT": carried, "TABLE": TABLE,
        "TRACE_PACKET": TRACE_PACKET, "Abandoned": Abandoned, "OpenScope": OpenScope, "Scope": Scope, "ann": ann,
        "ann_tables": ann_tables, "counters": counters, "event_line": event_line, "usage_args": usage_args,
        "varint": varint})["encode"]
    return made
