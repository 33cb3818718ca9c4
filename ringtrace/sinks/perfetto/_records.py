"""A run's records and pair events -> one track-event packet per record: the trace writer's hot path.

:func:`write` is what :class:`~._trace_writer.ProtoTrace` calls.  :func:`encode` is the reference
(pure Python); ``_encode.c`` (module ``_encode``) is its compiled twin, used where it was built unless
``RINGTRACE_PURE=1``.  The twin writes the records it can (ints within int64, rings and sites already
known, no abandoned scope) and stops at the first it cannot; :func:`encode` writes that record and the
twin goes on after it, so the packets are the reference's in every case, byte for byte
(tests/sinks/perfetto/test_encode.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ringtrace.config import pure_path
from ringtrace.model.records import RESOURCES, Abandoned, OpenScope, PairEvent, Record, Scope, UnmatchedEnd, Usage
from ringtrace.sinks._varint import varint

from ._file import TRACE_PACKET
from ._layout import RingState, RunState, event_line
from ._wire import (
    ANN_PREFIXES,
    BEGIN,
    COUNTER_EVENT,
    END,
    END6,
    END9,
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
    usage_args,
)

try:
    from . import _encode

    _encode.bind(Record=Record, Scope=Scope, Usage=Usage, Abandoned=Abandoned, UnmatchedEnd=UnmatchedEnd)
except ImportError:  # installed without a C compiler
    BUILT = False
except TypeError:  # pragma: no cover - a msgspec that keeps fields elsewhere than in member slots
    BUILT = False
else:
    BUILT = True

COMPILED = BUILT and not pure_path()
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
    if compiled and not BUILT:
        raise RuntimeError("the compiled Perfetto encoder was not built (no C compiler at install)")
    if not compiled or not n:
        encode(w, parts, run, records, events, 0, 0, n)
        return
    fast = _encode.encode
    rings, tm = run.rings, run.tm_uuid
    i, ei = fast(parts, rings, tm, records, events, 0, 0)
    while i < n:
        ei = encode(w, parts, run, records, events, i, ei, i + 1)
        i, ei = fast(parts, rings, tm, records, events, i + 1, ei)


def encode(w: Writer, parts: list[bytes], run: RunState, records: Sequence[Record], events: Sequence[PairEvent],
           i: int, ei: int, stop: int) -> int:
    """The packets of ``records[i:stop]`` (``events[ei:]`` are the pair events from ``records[i]`` on);
    returns the index of the first event after them.

    The hot loop: whole annotation fields of small values come from tables, everything is local.  The
    pair events are in record order and each names the line of the record that caused it, so the two
    lists are merged in one pass; a closing :class:`Scope` ends the top slice of its track.
    """
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
    T0, T1, T2, T3, T4, T5, T6, T7, T8 = tables[IID_USAGE:IID_USAGE + 9]
    P0, P1, P2, P3, P4, P5, P6, P7, P8 = ANN_PREFIXES[IID_USAGE:IID_USAGE + 3 * len(RESOURCES)]
    last_r = records[i].ring
    ring = rings.get(last_r) or w.new_ring(run, records[i])
    for k in range(i, stop):
        rec = records[k]
        line = rec.line
        r = rec.ring
        if r != last_r:
            ring = rings.get(r) or w.new_ring(run, rec)
            last_r = r
        closing: Scope | None = None
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
        x0 = rec.task_window_end - rec.task_window_start
        a = varint(x0)
        x1 = rec.heap_end - rec.heap_start
        b = varint(x1)
        caps = ring.caps
        if ring.has_dp:
            x = (rec.dep_pool_end or 0) - (rec.dep_pool_start or 0)
            c = varint(x)
            vals = join((EV_EXTRA_VALUE, a, EV_EXTRA_VALUE, b, EV_EXTRA_VALUE, c))
            pct = join((EV_EXTRA_VALUE, varint(100 * x0 // caps[0]), EV_EXTRA_VALUE, varint(100 * x1 // caps[1]),
                        EV_EXTRA_VALUE, varint(100 * x // caps[2]))) if caps else b""
        else:
            vals = join((EV_EXTRA_VALUE, a, EV_EXTRA_VALUE, b))
            pct = join((EV_EXTRA_VALUE, varint(100 * x0 // caps[0]), EV_EXTRA_VALUE,
                        varint(100 * x1 // caps[1]))) if caps else b""
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
            u_tw, u_hp, u_dp = closing.usage
            if u_tw is None or u_hp is None:  # not from the pairer: every scope has these two
                te = join((END, vals, EV_EXTRA_VALUE, vtp, a, a_line[len(b)], b, usage_args(closing)))
            else:
                x = u_tw.high_water
                v0 = T0[x] if 0 <= x < TABLE else ann(P0, x)
                x = u_tw.live_at_exit
                v1 = T1[x] if 0 <= x < TABLE else ann(P1, x)
                x = u_tw.alloc
                v2 = T2[x] if 0 <= x < TABLE else ann(P2, x)
                x = u_hp.high_water
                v3 = T3[x] if 0 <= x < TABLE else ann(P3, x)
                x = u_hp.live_at_exit
                v4 = T4[x] if 0 <= x < TABLE else ann(P4, x)
                x = u_hp.alloc
                v5 = T5[x] if 0 <= x < TABLE else ann(P5, x)
                if u_dp is None:
                    te = END6 % (vals, vtp, a, a_line[len(b)], b, v0, v1, v2, v3, v4, v5)
                else:
                    x = u_dp.high_water
                    v6 = T6[x] if 0 <= x < TABLE else ann(P6, x)
                    x = u_dp.live_at_exit
                    v7 = T7[x] if 0 <= x < TABLE else ann(P7, x)
                    x = u_dp.alloc
                    v8 = T8[x] if 0 <= x < TABLE else ann(P8, x)
                    te = END9 % (vals, vtp, a, a_line[len(b)], b, v0, v1, v2, v3, v4, v5, v6, v7, v8)
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
