"""The SDK's view of ringtrace's spans: the reference the wire encoder is tested against.

:func:`to_readable` makes a :class:`~ringtrace.sinks.otlp._spans.SpanData` an SDK
``ReadableSpan`` (for the stock exporters in the tests and the benchmark); :func:`scope_attrs`
spells out, as plain attributes, what ``scope_attr_bytes`` writes as bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ringtrace.model.records import RESOURCES, Scope
from ringtrace.sinks.otlp._select import METRICS
from ringtrace.sinks.otlp._spans import Attrs, SpanData


def scope_attrs(scope: Scope, caps: Sequence[int | None]) -> Attrs:
    """``ringtrace.depth/ring/line/end_line`` and, per resource, the three figures and their ratios."""
    out: Attrs = [("ringtrace.depth", scope.depth), ("ringtrace.ring", scope.ring),
                  ("ringtrace.line", scope.begin_line), ("ringtrace.end_line", scope.end_line)]
    for res, usage in zip(RESOURCES, scope.usage, strict=False):
        if usage is None:
            continue
        figures = (usage.high_water, usage.live_at_exit, usage.alloc)
        out += [(f"ringtrace.{res}.{m}", v) for m, v in zip(METRICS, figures, strict=True)]
        cap = caps[RESOURCES.index(res)]
        if cap:
            out += [(f"ringtrace.{res}.{m}_ratio", v / cap) for m, v in zip(METRICS, figures, strict=True)]
    return out


def all_attrs(sp: SpanData) -> Attrs:
    """Every attribute of ``sp``, in the order the encoder writes them."""
    return sp.attrs if sp.scope is None else scope_attrs(sp.scope, sp.caps) + sp.attrs


def to_readable(trace_id: bytes, sp: SpanData, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """The same span as an SDK ``ReadableSpan``."""
    tid = int.from_bytes(trace_id, "big")
    ctx = SpanContext(tid, int.from_bytes(sp.span_id, "big"), False, TraceFlags(TraceFlags.SAMPLED))
    parent = (SpanContext(tid, int.from_bytes(sp.parent_id, "big"), False, TraceFlags(TraceFlags.SAMPLED))
              if sp.parent_id else None)
    status = Status(StatusCode.ERROR, sp.error) if sp.error is not None else Status(StatusCode.UNSET)
    events = [Event(e.name, dict(e.attrs), e.time_ns) for e in sp.events]
    return ReadableSpan(sp.name, ctx, parent, resource, dict(all_attrs(sp)), events, (), SpanKind.INTERNAL,
                        status=status, start_time=sp.start_ns, end_time=sp.end_ns, instrumentation_scope=scope)
