"""Drive a :class:`~ringtrace.sinks.prometheus.PrometheusSink` in-process and read what it exposes.

An injected :class:`Clock` (moved by hand) stands for the wall clock; :func:`series`, :func:`pick`
and :func:`one` parse the text exposition into ``{(name, labels): value}``; :func:`fed` and
:func:`feed` push real files or bytes through; :func:`same_as_fresh` checks an exposition against
a sink built anew from the same events.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import Labels, RunFinished, SinkEvent, Source
from ringtrace.sinks import FanOut
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.stages.run import Run

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Clock:
    """An injected wall clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def series(sink: PrometheusSink) -> Series:
    text = generate_latest(sink.registry).decode()
    out: Series = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def pick(all_series: Series, name: str, **labels: str) -> dict[frozenset[tuple[str, str]], float]:
    """Series of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in all_series.items() if n == name and want <= lab}


def one(all_series: Series, name: str, **labels: str) -> float:
    found = pick(all_series, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {len(found)} series: {found}"
    return next(iter(found.values()))


def events_of(data: bytes, source: Source, chunk: int, reason: str = "eof") -> list[SinkEvent]:
    run = Run(source, Thresholds())
    out: list[SinkEvent] = []
    for i in range(0, len(data), chunk):
        out.extend(run.feed(data[i:i + chunk]))
    out.extend(run.finish(reason))  # type: ignore[arg-type]
    return out


def fed(files: Iterable[Path], clock: Clock | None = None, **kw: object) -> PrometheusSink:
    sink = PrometheusSink(clock=clock or Clock(), **kw)  # type: ignore[arg-type]
    read_files(list(files), FanOut([sink]), Thresholds())
    return sink


def same_as_fresh(sink: PrometheusSink) -> bytes:
    """Both formats of ``render`` equal prometheus_client's encoders over the registry; returns the text."""
    text, ctype = sink.render("")
    assert ctype.startswith("text/plain")
    assert text == generate_latest(sink.registry)
    om, ctype = sink.render(OM_ACCEPT)
    assert ctype.startswith(OPENMETRICS.split(";")[0])
    assert om == generate_openmetrics(sink.registry)
    list(parse_openmetrics(om.decode()))  # strict parser: one EOF, families not repeated
    return text


def feed(sink: PrometheusSink, path: str, data: bytes, run: str, **final: object) -> None:

    for ev in events_of(data, Source(path, Labels(run=run)), 1 << 20):
        if isinstance(ev, RunFinished):
            ev = msgspec.structs.replace(ev, **final)
        sink.receive(ev)


OM_ACCEPT = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
