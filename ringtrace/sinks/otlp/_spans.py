"""One finished run -> spans: deterministic ids, the record-index time axis, attributes, OTLP bytes.

* **Ids.**  The trace id is blake2b (16 bytes) of the run's identity: the source path made
  absolute, its generation and ``seen_at`` in microseconds; a span id is blake2b (8 bytes) of
  the identity and the span's begin line (0 for the root).  Converting the same unchanged file
  twice gives the same ids, so backends deduplicate a re-send; a run that rewrites the file
  (new mtime or generation) gets a new trace instead of colliding with the old one.  ``watch``
  uses the run's key instead (``RunFinished.key``: path + file identity at the finish), so a
  run read again after a restart keeps its ids although it was first seen at another time.
* **Time.**  Records carry no timestamps: ``t(line) = seen_at + line x tick`` (``seen_at`` is
  when the file was first seen, or its mtime for ``convert``; the current wall time when
  unknown).  A scope spans ``t(begin_line)`` .. ``t(end_line)``; the root and wedged scopes end
  at ``t(last line + 1)``.  The root span states this in ``ringtrace.time_axis``.
* **Wire.**  :class:`WireEncoder` writes ``ExportTraceServiceRequest`` protobuf bytes directly
  (the SDK's generic encoder builds ~45 protobuf objects per span and costs 5-8x the CPU, see
  ``tests/bench/bench_otlp.py``); tests prove its output parses equal to the SDK encoder's on
  the same spans made SDK ``ReadableSpan`` objects (``tests/_support/otlp_view.py``).

Pure: no I/O, no clock (``seen_at`` comes from the caller).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from hashlib import blake2b
from typing import Any

import msgspec
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.model.records import RESOURCES, Finding, OpenScope, RunFinished, Scope, Verdict, WedgeCause
from ringtrace.model.runtime import error_name
from ringtrace.sinks._varint import I32, I64, LEN, VARINT, tag, varint

from ._select import METRICS, Selection

AttrValue = bool | int | float | str | tuple[int, ...] | tuple[str, ...]
Attrs = list[tuple[str, AttrValue]]
PREFIX = "ringtrace."


class SpanEvent(msgspec.Struct, frozen=True):
    name: str
    time_ns: int
    attrs: Attrs


class SpanData(msgspec.Struct, frozen=True, gc=False):
    """One span, ready to encode.  ``parent_id`` is empty for the root; ``error`` set = status ERROR.

    A scope span keeps its :class:`Scope` and the ring's capacities instead of a list of
    attributes (:func:`scope_attr_bytes` writes them: ``ringtrace.depth/ring/line/end_line`` and,
    per resource, the three figures and their ratios); ``attrs`` then holds the extra ones
    (``ringtrace.peak``, ``ringtrace.parent_line``), which follow.
    """

    span_id: bytes
    parent_id: bytes
    name: str
    start_ns: int
    end_ns: int
    attrs: Attrs
    error: str | None = None
    events: tuple[SpanEvent, ...] = ()
    scope: Scope | None = None
    caps: tuple[int | None, ...] = ()


class RunIds:
    """Trace and span ids of one run (see the module docstring)."""

    def __init__(self, path: str, generation: int, seen_at: float) -> None:
        ident = f"{os.path.abspath(path)}\0{generation}\0{round(seen_at * 1e6)}".encode()
        self.trace_id = _nonzero(blake2b(ident, digest_size=16, person=b"ringtrace.trace").digest())
        self._span = blake2b(ident, digest_size=8, person=b"ringtrace.span")

    def span_id(self, line: int) -> bytes:
        h = self._span.copy()
        h.update(line.to_bytes(8, "big"))
        return _nonzero(h.digest())


def _nonzero(b: bytes) -> bytes:
    return b if any(b) else b[:-1] + b"\x01"


class TimeAxis:
    """``at(line)`` in Unix nanoseconds: ``seen_at`` + ``line`` x ``tick`` seconds."""

    def __init__(self, seen_at: float, tick: float) -> None:
        self.base_ns = round(seen_at * 1e9)
        self.tick_ns = tick * 1e9

    def at(self, line: int) -> int:
        return self.base_ns + round(line * self.tick_ns)


# -- building ----------------------------------------------------------------------------------


_USAGE_KEYS = tuple(tuple(f"{PREFIX}{res}.{m}" for m in (*METRICS, *(f"{x}_ratio" for x in METRICS)))
                    for res in RESOURCES)


def root_attrs(fin: RunFinished, tick: float, sel: Selection, max_spans: int, last_line: int) -> Attrs:
    s, src, meta = fin.summary, fin.source, fin.summary.meta
    lab = src.labels
    unit = f"{tick * 1e6:g}us" if tick < 1e-3 else f"{tick * 1e3:g}ms" if tick < 1 else f"{tick:g}s"
    axis = f"record line index x {unit} from file first seen (records carry no timestamps)"
    out: Attrs = [("ringtrace.path", src.display_path), ("ringtrace.generation", src.generation)]
    out += [(f"{PREFIX}{k}", v) for k, v in (("run", lab.run), ("rank", lab.rank), ("dispatch", lab.dispatch),
                                              ("program", lab.program)) if v]
    if meta is not None:
        out += [("ringtrace.version", meta.version), ("ringtrace.fatal", meta.fatal),
                ("ringtrace.dropped", meta.dropped)]
        if meta.total is not None:
            out.append(("ringtrace.total", meta.total))
        out += [(f"{PREFIX}{r}_max", tuple(getattr(meta, f"{r}_max"))) for r in RESOURCES
                if getattr(meta, f"{r}_max")]
        if meta.tensormap_max is not None:
            out.append(("ringtrace.tensormap_max", meta.tensormap_max))
    out += [("ringtrace.complete", s.complete), ("ringtrace.records", s.records), ("ringtrace.scopes", s.scopes),
            ("ringtrace.max_depth", s.max_depth), ("ringtrace.unmatched_begins", s.unmatched_begins),
            ("ringtrace.unmatched_ends", s.unmatched_ends), ("ringtrace.parse_errors", s.parse_errors),
            ("ringtrace.last_line", last_line), ("ringtrace.finish_reason", fin.reason),
            ("ringtrace.wedged", bool(s.wedged)), ("ringtrace.time_axis", axis),
            ("ringtrace.tick_seconds", float(tick)), ("ringtrace.spans.max", max_spans),
            ("ringtrace.spans.kept", 1 + len(s.wedged) + len(sel.scopes)),
            ("ringtrace.spans.omitted", sel.omitted)]
    return out + verdict_attrs(fin.verdict)


def verdict_attrs(v: Verdict) -> Attrs:
    """The run's one verdict on its root span: ``ringtrace.verdict.kind``, ``.severity``, ``.text`` and what it
    rests on (``.ring``, ``.resource``, ``.site``, ``.code``, ``.code_name``, where it names one)."""
    out: Attrs = [("ringtrace.verdict.kind", v.kind), ("ringtrace.verdict.severity", v.severity),
                  ("ringtrace.verdict.text", v.text)]
    out += [(f"ringtrace.verdict.{k}", x) for k, x in (("ring", v.ring), ("resource", v.resource), ("site", v.site),
                                                        ("code", v.code), ("code_name", v.code_name))
            if x is not None]
    return out


def _finding_event(f: Finding, at_ns: int) -> SpanEvent:
    attrs: Attrs = [("ringtrace.rule", f.rule), ("ringtrace.severity", f.severity), ("ringtrace.message", f.message)]
    attrs += [(f"{PREFIX}{k}", v) for k, v in (("ring", f.ring), ("resource", f.resource), ("site", f.site))
              if v is not None]
    return SpanEvent("ringtrace.finding", at_ns, attrs)


def _wedged_event(w: OpenScope, cause: WedgeCause | None, at_ns: int) -> SpanEvent:
    """The ring and the resource closest to capacity at the last sample, and the likely code: the
    run's :class:`WedgeCause` for this scope (diagnosed once, with the configured thresholds and the
    host log, so the span says what ``summary`` says)."""
    c = cause or WedgeCause(w.ring, None, 0.0)
    resource, code = c.resource or "unknown", c.code
    attrs: Attrs = [("ringtrace.ring", w.ring), ("ringtrace.resource", resource),
                    ("ringtrace.fill_ratio", float(c.fill))]
    name = error_name(code) or ""
    if code is not None:
        attrs += [("ringtrace.orch_error_code", code), ("ringtrace.orch_error", name)]
    if c.confirmed is not None:
        attrs.append(("ringtrace.confirmed_by_host_log", c.confirmed))
    where = "tensormap" if code == 11 else f"ring {w.ring} {resource}"
    text = f"scope {w.site} never closed; {where} at {100 * c.fill:.0f}% of capacity at the last sample"
    if code is not None:
        said = "orch_error_code" if c.confirmed else "likely orch_error_code"
        text += f": {said}={code} {name}".rstrip()
    attrs.append(("ringtrace.message", text))
    return SpanEvent("ringtrace.wedged", at_ns, attrs)


def build_spans(fin: RunFinished, sel: Selection, ids: RunIds, axis: TimeAxis, tick: float, max_spans: int,
                last_line: int) -> list[SpanData]:
    """Root first, then wedged scopes (outermost first), then the kept scopes by begin line."""
    s = fin.summary
    end_ns = axis.at(last_line + 1)
    root_id = ids.span_id(0)
    events = tuple(_finding_event(f, end_ns) for f in fin.findings)
    verdict = fin.verdict  # status ERROR iff the verdict fails the run (severity error), its text the message
    spans = [SpanData(root_id, b"", fin.source.name, axis.at(1), end_ns,
                      root_attrs(fin, tick, sel, max_spans, last_line), verdict.text if verdict.fails_check else None,
                      events)]
    present = {0: root_id}  # begin line -> span id, of the spans so far
    parent = root_id
    causes = fin.wedge_causes
    for i, w in enumerate(s.wedged):
        sid = present[w.line] = ids.span_id(w.line)
        inner = i == len(s.wedged) - 1
        attrs: Attrs = [("ringtrace.depth", w.depth), ("ringtrace.ring", w.ring), ("ringtrace.line", w.line),
                        ("ringtrace.wedged", True), ("ringtrace.innermost", inner)]
        spans.append(SpanData(sid, parent, w.site, axis.at(w.line), end_ns, attrs,
                              f"wedged: scope {w.site} never closed" + (" (the run stopped here)" if inner else ""),
                              (_wedged_event(w, causes[i] if i < len(causes) else None, end_ns),)))
        parent = sid
    caps_by_ring: dict[int, tuple[int | None, ...]] = {}
    base, tick_ns = axis.base_ns, axis.tick_ns
    for scope in sel.scopes:  # by begin line: an enclosing scope comes before the scopes inside it
        caps = caps_by_ring.get(scope.ring)
        if caps is None:
            meta = s.meta
            caps = caps_by_ring[scope.ring] = tuple(None if meta is None else meta.capacity(r, scope.ring)
                                                    for r in RESOURCES)
        extra: Attrs = []
        pid = present.get(scope.parent_line)
        if pid is None:  # its enclosing begin never paired (unmatched): hang it off the root
            pid = root_id
            extra.append(("ringtrace.parent_line", scope.parent_line))
        labels = sel.peaks.get(scope.begin_line)
        if labels:
            extra.append(("ringtrace.peak", labels))
        sid = present[scope.begin_line] = ids.span_id(scope.begin_line)
        spans.append(SpanData(sid, pid, scope.site, base + round(scope.begin_line * tick_ns),
                              base + round(scope.end_line * tick_ns), extra, None, (), scope, caps))
    return spans


# -- protobuf wire format (opentelemetry/proto/{collector/trace,trace,common,resource}/v1/*.proto) ---------
# Field tags, named once (message, then field).

REQUEST_RESOURCE_SPANS = tag(1, LEN)  # ExportTraceServiceRequest.resource_spans
RESOURCE_SPANS_RESOURCE = tag(1, LEN)  # ResourceSpans.resource
RESOURCE_SPANS_SCOPE_SPANS = tag(2, LEN)  # ResourceSpans.scope_spans
RESOURCE_SPANS_SCHEMA_URL = tag(3, LEN)  # ResourceSpans.schema_url
RESOURCE_ATTRIBUTES = tag(1, LEN)  # Resource.attributes
SCOPE_SPANS_SCOPE = tag(1, LEN)  # ScopeSpans.scope
SCOPE_SPANS_SPANS = tag(2, LEN)  # ScopeSpans.spans
SCOPE_NAME = tag(1, LEN)  # InstrumentationScope.name
SCOPE_VERSION = tag(2, LEN)  # InstrumentationScope.version
SPAN_TRACE_ID = tag(1, LEN)  # Span.trace_id (16 bytes)
SPAN_SPAN_ID = tag(2, LEN)  # Span.span_id (8 bytes)
SPAN_PARENT_SPAN_ID = tag(4, LEN)  # Span.parent_span_id (8 bytes)
SPAN_NAME = tag(5, LEN)  # Span.name
SPAN_KIND = tag(6, VARINT)  # Span.kind
SPAN_START_TIME = tag(7, I64)  # Span.start_time_unix_nano (fixed64)
SPAN_END_TIME = tag(8, I64)  # Span.end_time_unix_nano (fixed64)
SPAN_ATTRIBUTES = tag(9, LEN)  # Span.attributes
SPAN_EVENTS = tag(11, LEN)  # Span.events
SPAN_STATUS = tag(15, LEN)  # Span.status
SPAN_FLAGS = tag(16, I32)  # Span.flags (fixed32)
EVENT_TIME = tag(1, I64)  # Span.Event.time_unix_nano (fixed64)
EVENT_NAME = tag(2, LEN)  # Span.Event.name
EVENT_ATTRIBUTES = tag(3, LEN)  # Span.Event.attributes
STATUS_MESSAGE = tag(2, LEN)  # Status.message
STATUS_CODE = tag(3, VARINT)  # Status.code
KV_KEY = tag(1, LEN)  # KeyValue.key
KV_VALUE = tag(2, LEN)  # KeyValue.value
ANY_STRING = tag(1, LEN)  # AnyValue.string_value
ANY_BOOL = tag(2, VARINT)  # AnyValue.bool_value
ANY_INT = tag(3, VARINT)  # AnyValue.int_value
ANY_DOUBLE = tag(4, I64)  # AnyValue.double_value
ANY_ARRAY = tag(5, LEN)  # AnyValue.array_value
ANY_BYTES = tag(7, LEN)  # AnyValue.bytes_value
ARRAY_VALUES = tag(1, LEN)  # ArrayValue.values
SPAN_KIND_INTERNAL, STATUS_CODE_ERROR = 1, 2

_PACK_D = struct.Struct("<d").pack
_PACK_Q = struct.Struct("<Q").pack
_PACK_TIMES = struct.Struct(f"<{len(SPAN_START_TIME)}sQ{len(SPAN_END_TIME)}sQ").pack  # start and end fields
_KIND_INTERNAL = SPAN_KIND + varint(SPAN_KIND_INTERNAL)
_FLAGS = SPAN_FLAGS + struct.pack("<I", 0x100)  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, as the SDK sets
_SPAN_ID_FIELD = SPAN_SPAN_ID + varint(8)  # then the 8 id bytes
_PARENT_ID_FIELD = SPAN_PARENT_SPAN_ID + varint(8)
_STATUS_UNSET = SPAN_STATUS + varint(0)  # an empty Status
_STATUS_ERROR_CODE = STATUS_CODE + varint(STATUS_CODE_ERROR)
_TRUE, _FALSE = ANY_BOOL + varint(1), ANY_BOOL + varint(0)


def _ld(field_tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return field_tag + varint(len(payload)) + payload


def any_value(v: Any) -> bytes:
    """An ``AnyValue`` message for an attribute value (the SDK's ``_encode_value`` types)."""
    t = type(v)
    if t is int:
        return ANY_INT + varint(v)
    if t is float:
        return ANY_DOUBLE + _PACK_D(v)
    if t is str:
        return _ld(ANY_STRING, v.encode())
    if t is bool:
        return _TRUE if v else _FALSE
    if t is bytes:
        return _ld(ANY_BYTES, v)
    if isinstance(v, Sequence):
        return _ld(ANY_ARRAY, b"".join(_ld(ARRAY_VALUES, any_value(x)) for x in v))
    raise TypeError(f"cannot encode attribute value of type {t.__name__}")


def key_values(attrs: Iterable[tuple[str, Any]], field_tag: bytes) -> bytes:
    """Repeated ``KeyValue`` fields with field tag ``field_tag``."""
    return b"".join(_ld(field_tag, _ld(KV_KEY, k.encode()) + _ld(KV_VALUE, any_value(v))) for k, v in attrs)


def _head(key: str, value_tag: bytes, n: int) -> bytes:
    """Span attribute ``key`` (a KeyValue) up to the ``n`` bytes of its AnyValue's ``value_tag`` field."""
    kf = _ld(KV_KEY, key.encode())
    value_len = len(value_tag) + n
    return SPAN_ATTRIBUTES + varint(len(kf) + len(KV_VALUE) + 1 + value_len) + kf + KV_VALUE + varint(value_len) \
        + value_tag


def _int_heads(key: str) -> tuple[bytes, ...]:
    """:func:`_head` of an int attribute, indexed by the length of its varint (1..10)."""
    return (b"", *(_head(key, ANY_INT, n) for n in range(1, 11)))


_BASE_HEADS = tuple(_int_heads(f"{PREFIX}{k}") for k in ("depth", "ring", "line", "end_line"))
_USAGE_INT_HEADS = tuple(tuple(_int_heads(k) for k in keys[:3]) for keys in _USAGE_KEYS)
_RATIO_HEADS = tuple(tuple(_head(k, ANY_DOUBLE, 8) for k in keys[3:]) for keys in _USAGE_KEYS)
_RATIO_PACKS = tuple(struct.Struct("<" + "".join(f"{len(h)}sd" for h in heads)).pack for heads in _RATIO_HEADS)


def scope_attr_bytes(scope: Scope, caps: Sequence[int | None]) -> bytes:
    """The scope's attributes (see :class:`SpanData`) as span field 9 entries, without intermediate objects."""
    out: list[bytes] = []
    for heads, v in zip(_BASE_HEADS, (scope.depth, scope.ring, scope.begin_line, scope.end_line), strict=True):
        vb = varint(v)
        out += (heads[len(vb)], vb)
    for r, usage in enumerate(scope.usage):
        if usage is None:
            continue
        hw, live, alloc = usage.high_water, usage.live_at_exit, usage.alloc
        ih = _USAGE_INT_HEADS[r]
        vb = varint(hw)
        out += (ih[0][len(vb)], vb)
        vb = varint(live)
        out += (ih[1][len(vb)], vb)
        vb = varint(alloc)
        out += (ih[2][len(vb)], vb)
        cap = caps[r]
        if cap:
            dh = _RATIO_HEADS[r]
            out.append(_RATIO_PACKS[r](dh[0], hw / cap, dh[1], live / cap, dh[2], alloc / cap))
    return b"".join(out)


def encode_span(trace_field: bytes, sp: SpanData) -> bytes:
    """One ``Span`` message, field for field what the SDK's ``_encode_span`` produces.

    ``trace_field`` is the encoded ``Span.trace_id`` field (the same for every span of a trace).
    """
    name = sp.name.encode()
    body = [trace_field, _SPAN_ID_FIELD, sp.span_id]
    if sp.parent_id:
        body += (_PARENT_ID_FIELD, sp.parent_id)
    body += (SPAN_NAME, varint(len(name)), name, _KIND_INTERNAL,
             _PACK_TIMES(SPAN_START_TIME, sp.start_ns, SPAN_END_TIME, sp.end_ns))
    if sp.scope is not None:
        body.append(scope_attr_bytes(sp.scope, sp.caps))
    if sp.attrs:
        body.append(key_values(sp.attrs, SPAN_ATTRIBUTES))
    for ev in sp.events:
        body.append(_ld(SPAN_EVENTS, EVENT_TIME + _PACK_Q(ev.time_ns) + _ld(EVENT_NAME, ev.name.encode())
                        + key_values(ev.attrs, EVENT_ATTRIBUTES)))
    if sp.error is None:
        body.append(_STATUS_UNSET)
    else:
        body.append(_ld(SPAN_STATUS, _ld(STATUS_MESSAGE, sp.error.encode()) + _STATUS_ERROR_CODE))
    body.append(_FLAGS)
    return b"".join(body)


class WireEncoder:
    """``ExportTraceServiceRequest`` bytes for spans of one resource and instrumentation scope."""

    def __init__(self, resource: Resource, scope: InstrumentationScope) -> None:
        self.resource = resource
        self.scope = scope
        self._resource = _ld(RESOURCE_SPANS_RESOURCE, key_values(resource.attributes.items(), RESOURCE_ATTRIBUTES))
        scope_msg = _ld(SCOPE_NAME, scope.name.encode()) + (_ld(SCOPE_VERSION, scope.version.encode())
                                                           if scope.version else b"")
        self._scope = _ld(SCOPE_SPANS_SCOPE, scope_msg)
        self._schema = _ld(RESOURCE_SPANS_SCHEMA_URL, resource.schema_url.encode()) if resource.schema_url else b""

    def request(self, trace_id: bytes, spans: Iterable[SpanData]) -> bytes:
        tf = _ld(SPAN_TRACE_ID, trace_id)
        scope_spans = self._scope + b"".join(_ld(SCOPE_SPANS_SPANS, encode_span(tf, sp)) for sp in spans)
        return _ld(REQUEST_RESOURCE_SPANS, self._resource + _ld(RESOURCE_SPANS_SCOPE_SPANS, scope_spans)
                   + self._schema)
