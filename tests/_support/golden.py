"""Every exporter's output for a golden case (``tests/golden/<case>/``), made deterministic in this one place.

A case is read the way every command reads (:func:`ringtrace.cli.common.read_inputs`: its files, the
host logs of its runs' folders, ``--host-log`` from ``args.json``), from inside ``input/`` so that paths are
relative.  The events are then given to each exporter as ``watch`` and ``convert`` would:

* ``expected.events.jsonl``: the events file (:class:`~ringtrace.sinks.events.EventsSink`);
* ``expected.prom``: the Prometheus text exposition (:class:`~ringtrace.sinks.prometheus.PrometheusSink`);
* ``expected.perfetto.txt``: the native Perfetto trace (:class:`~ringtrace.sinks.perfetto.PerfettoSink`) as
  protobuf text, its compressed packets inflated;
* ``expected.otlp.json``: the OTLP export requests (:class:`~ringtrace.sinks.otlp.OtlpSink`, through a
  transport that keeps what it is given) as protobuf JSON.

**What is normalised, and only here:** the wall clock.  Every event's ``seen_at`` (a one-shot read
takes the file's mtime, which a checkout sets) is :data:`SEEN_AT`; the Prometheus sink's clock and the
OTLP sink's ``wall`` are :data:`SEEN_AT`.  The OTLP resource is ``service.name=ringtrace`` alone (the
host name and the OpenTelemetry version are the machine's), and the versions the outputs carry (the
ringtrace version in ``ringtrace_build_info`` and the OTLP scope, the Python version) read
``VERSION``.  The OTLP ids hash the run's absolute path, so the OTLP sink runs with ``/`` as the working
directory: the case's relative paths make the same ids in every checkout.  Nothing else is touched: ids,
keys and figures are what the code makes.

Regenerate every expected file (these and the summary/check ones) with ``make golden`` and review the
diff (``tests/golden/README.md``).
"""

from __future__ import annotations

import io
import json
import os
import platform
import tempfile
import zlib
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
from rich.console import Console

from ringtrace import config
from ringtrace.cli.common import Consoles, read_inputs
from ringtrace.model.records import RunFinished, RunStarted, SinkEvent
from ringtrace.sinks import FanOut, ringtrace_version
from tests._support.sinks import Collect

SEEN_AT = 1_700_000_000.0
"""The wall clock of every golden output (2023-11-14T22:13:20Z)."""
EXPORTERS = ("events.jsonl", "prom", "perfetto.txt", "otlp.json")
"""The suffixes of the expected files: ``expected.<suffix>``."""


@contextmanager
def _inside(directory: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(directory)
    try:
        yield
    finally:
        os.chdir(before)


def case_events(case: Path, args: list[str]) -> list[SinkEvent]:
    """The events of ``case`` read as the commands read them (``args``: the summary's, e.g. ``["."]``),
    every ``seen_at`` set to :data:`SEEN_AT`."""
    host_logs = [a for i, a in enumerate(args) if i and args[i - 1] == "--host-log"]
    paths = [a for i, a in enumerate(args) if a != "--host-log" and not (i and args[i - 1] == "--host-log")]
    cap = Collect()
    with _inside(case / "input"):
        read_inputs(paths, config.build({}, env={}), [cap], Consoles(err=Console(file=io.StringIO())), host_logs)
    return [msgspec.structs.replace(e, seen_at=SEEN_AT) if isinstance(e, RunStarted | RunFinished) else e
            for e in cap.events]


def _versions(text: str) -> str:
    return text.replace(ringtrace_version(), "VERSION").replace(platform.python_version(), "VERSION")


def events_file(events: list[SinkEvent]) -> str:
    from ringtrace.sinks.events import EventsSink

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "events.jsonl"
        sink = EventsSink.open(str(path))
        FanOut([sink]).receive_all(events)
        sink.close()
        return path.read_text()


def prometheus(events: list[SinkEvent]) -> str:
    from ringtrace.sinks.prometheus import PrometheusSink

    sink = PrometheusSink(clock=lambda: SEEN_AT)
    FanOut([sink]).receive_all(events)
    body, _ = sink.render("")
    return _versions(body.decode())


def perfetto(events: list[SinkEvent]) -> str:
    from google.protobuf import text_format
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from ringtrace.sinks.perfetto import PerfettoSink

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace.pftrace"
        sink = PerfettoSink(path)
        fan = FanOut([sink])
        fan.receive_all(events)
        fan.close()
        outer = pb.Trace.FromString(path.read_bytes())
    lines: list[str] = []
    for packet in outer.packet:
        if packet.HasField("compressed_packets"):
            for inner in pb.Trace.FromString(zlib.decompress(packet.compressed_packets)).packet:
                lines.append(text_format.MessageToString(inner, as_one_line=True))
        else:
            lines.append(text_format.MessageToString(packet, as_one_line=True))
    return "\n".join(lines) + "\n"


class _Kept:
    """An OTLP transport that keeps every request it is given and answers it accepted."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    def send(self, payload: bytes, timeout: float) -> object:
        from ringtrace.sinks.otlp._export import Attempt

        self.payloads.append(payload)
        return Attempt(True)

    def abort(self) -> None:
        pass


def otlp(events: list[SinkEvent]) -> str:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.sdk.resources import Resource

    from ringtrace.sinks.otlp import OtlpSink

    kept = _Kept()
    sink = OtlpSink(None, "grpc", transport=kept, wall=lambda: SEEN_AT,  # type: ignore[arg-type]
                    resource=Resource({"service.name": "ringtrace"}))
    fan = FanOut([sink])
    with _inside(Path("/")):  # the ids hash the absolute path: the same in every checkout
        fan.receive_all(events)
        fan.close()
    requests = [json_format.MessageToDict(ExportTraceServiceRequest.FromString(p)) for p in kept.payloads]
    return _versions(json.dumps(requests, indent=1, sort_keys=True)) + "\n"


def exporter_outputs(case: Path, args: list[str], which: Collection[str] = EXPORTERS) -> dict[str, str]:
    """``{suffix: text}`` of the exporters ``which`` (suffixes of :data:`EXPORTERS`) for ``case``."""
    events = case_events(case, args)
    make = {"events.jsonl": events_file, "prom": prometheus, "perfetto.txt": perfetto, "otlp.json": otlp}
    return {x: make[x](events) for x in which}

