"""Helpers shared by the OTLP sink's tests (``tests/sinks/otlp/``); their fixtures (``rx``, ``pki``,
``big_run``) are in ``tests/sinks/otlp/conftest.py``.

* ``PROTOCOLS`` (gRPC and HTTP/protobuf) and ``SMALL_NESTED``, a small real run of nested scopes;
* :class:`FakeTime` — an injected ``sleep``/``clock`` pair: sleeping advances the clock, nothing waits;
* :func:`convert` / :func:`deliver` — real files through the real reader into a
  :class:`~tests._support.sinks.Collect` and an :class:`~ringtrace.sinks.otlp.OtlpSink` on one-shot
  outlets; :func:`make_sink` — a sink aimed at an :class:`~tests._support.otlp_receiver.OtlpReceiver`;
  :func:`kept_spans` — how many spans the
  collected runs make (root + wedged + paired scopes, no budget);
* :func:`by_trace` / :func:`root_of` — the receiver's spans per trace, and a trace's one root;
* :func:`generated_tree` — every named simulator scenario as a run on disk;
* :class:`Boom` — a transport whose ``send`` raises;
* :class:`Batch`, :func:`encoded`, :func:`sample_batches` — the same spans as our wire encoder's bytes
  and as SDK ``ReadableSpan`` objects (:mod:`tests._support.otlp_view`), for the real samples.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from ringtrace.config import Thresholds
from ringtrace.demo import sim
from ringtrace.gather.oneshot import read_files
from ringtrace.sinks import FanOut
from ringtrace.sinks.otlp import OtlpSink, Protocol
from ringtrace.sinks.otlp._export import Attempt
from ringtrace.sinks.otlp._select import Budget
from ringtrace.sinks.otlp._spans import RunIds, SpanData, TimeAxis, WireEncoder, build_spans
from ringtrace.sources.paths import find_sources
from tests._support.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests._support.otlp_view import to_readable
from tests._support.samples import SAMPLES
from tests._support.sinks import Collect

PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http/protobuf")
SMALL_NESTED = SAMPLES / "outputs/NestedScopes_small_20261130_101702/scope_stats/scope_stats.jsonl"


class FakeTime:
    """Injected ``sleep``/``clock``: sleeping advances the clock and may run a hook; nothing waits."""

    def __init__(self, hook: Callable[[int], None] | None = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.hook = hook

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.hook is not None:
            self.hook(len(self.sleeps))


def convert(paths: Sequence[Path], sink: OtlpSink, flush: bool = True) -> Collect:
    """Read ``paths`` into a Collect and ``sink`` as ``convert`` does (one-shot outlets: the sink exports on
    its outlet's worker); with ``flush`` the fan-out's flush and close follow (the sink is then closed)."""
    col, fan = deliver(paths, sink)
    if flush:
        fan.flush(time.monotonic() + 60)
        fan.close()
        assert fan.errors == {"collect": 0, "otlp": 0}
    return col


def deliver(paths: Sequence[Path], sink: OtlpSink) -> tuple[Collect, FanOut]:
    """Read ``paths`` into a Collect and ``sink`` on one-shot outlets, and return at once: the sink may
    still be exporting (the caller flushes or shuts the fan-out down)."""
    files, errors = find_sources([str(p) for p in paths])
    assert not errors
    col = Collect()
    fan = FanOut([col, sink])
    fan.start_oneshot()
    assert not read_files(files, fan, Thresholds())
    return col, fan


def make_sink(rx: OtlpReceiver, protocol: Protocol, **kw: Any) -> OtlpSink:
    return OtlpSink(rx.endpoint(protocol), protocol, **kw)


def kept_spans(col: Collect) -> int:
    return sum(1 + len(f.summary.wedged) + len(col.scopes[p]) for p, f in col.finished.items())


def by_trace(spans: list[ReceivedSpan]) -> dict[str, list[ReceivedSpan]]:
    out: dict[str, list[ReceivedSpan]] = {}
    for sp in spans:
        out.setdefault(sp.trace_id, []).append(sp)
    return out


def root_of(spans: list[ReceivedSpan]) -> ReceivedSpan:
    roots = [s for s in spans if not s.parent_id]
    assert len(roots) == 1
    return roots[0]


def generated_tree(root: Path) -> list[Path]:
    """Every named simulator scenario as an L2 run below ``root``."""
    paths = []
    for name in sim.NAMES:
        path = root / f"{name}_run" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
        path.parent.mkdir(parents=True)
        sim.write_file(path, sim.named(name, seed=7))
        paths.append(path)
    return paths


class Boom:
    """A transport whose send raises: a bug must be counted, never kill the worker or reach the reader."""

    def __init__(self) -> None:
        self.calls = 0

    def send(self, payload: bytes, timeout: float) -> Attempt:
        self.calls += 1
        raise RuntimeError("boom")

    def abort(self) -> None:
        pass


class Batch(NamedTuple):
    """The same spans of one trace as our encoder's bytes and as SDK ``ReadableSpan`` objects."""

    payload: bytes
    spans: list[ReadableSpan]


def encoded(enc: WireEncoder, trace_id: bytes, spans: list[SpanData]) -> Batch:
    return Batch(enc.request(trace_id, spans), [to_readable(trace_id, sp, enc.resource, enc.scope) for sp in spans])


def sample_batches() -> Iterator[Batch]:
    res = Resource.create({"service.name": "ringtrace", "n": 3, "list": ("a", "b")})
    enc = WireEncoder(res, InstrumentationScope("ringtrace", "9.9"))
    files, _ = find_sources([str(SAMPLES)])
    col = Collect()
    read_files(files, FanOut([col]), Thresholds())
    for path, fin in col.finished.items():
        budget = Budget(200)
        for sc in col.scopes[path]:
            budget.add(sc)
        ids = RunIds(path, 0, col.seen[path])
        spans = build_spans(fin, budget.select(1 + len(fin.summary.wedged)), ids, TimeAxis(col.seen[path], 1e-6),
                            1e-6, 200, col.last_line[path])
        yield encoded(enc, ids.trace_id, spans)
