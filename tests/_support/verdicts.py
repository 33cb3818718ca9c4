"""The one verdict of a run (``RunFinished.verdict``) as each sink shows it, for the tests that check a surface
says what the verdict says.

* :data:`REAL_RUNS` — the runtime's runs in ``tests/fixtures/realruns`` (a verdict kind each: see its README);
  :data:`VERDICT_PATHS` those and every sample (``tests/fixtures/samples``);
* :func:`verdict_events` — the events of real runs read as the CLI reads them: the host logs of the runs'
  folders matched to their files, a run known from its log alone reported after them;
* :func:`prometheus_verdicts` — ``ringtrace_run_verdict`` of a scrape, by (run, rank, dispatch);
* :func:`otlp_verdict` — a root span's verdict: attributes, and whether its status is ERROR with which message;
* :func:`trace_packets`, :func:`perfetto_verdicts` — a protobuf trace's packets (official decoder) and the
  verdict track of each of its processes; :func:`json_verdicts` — the same of a chrome-json trace;
  :func:`trace_processor_verdicts` — the verdict slices as the real trace processor reads them (``PerfettoUI``).

Each view is ``(kind, severity, text)`` or richer, so a test compares it with ``(v.kind, v.severity, v.text)``.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from ringtrace import gather
from ringtrace.config import Thresholds
from ringtrace.model.records import SinkEvent
from tests._support.otlp_receiver import ReceivedSpan
from tests._support.prometheus import Series
from tests._support.samples import SAMPLES
from tests._support.sinks import Collect

REALRUNS = Path(__file__).resolve().parents[1] / "fixtures" / "realruns"
REAL_RUNS: list[Path] = sorted(p for p in REALRUNS.iterdir() if p.is_dir())
VERDICT_PATHS: list[Path] = [SAMPLES, *REAL_RUNS]


def verdict_events(paths: list[Path], thresholds: Thresholds | None = None) -> list[SinkEvent]:
    """Every event of ``paths`` as ``summary``/``convert`` read them (:func:`ringtrace.gather.read`): files with
    their folders' host logs, then the runs known from a log alone."""
    names = [str(p) for p in paths]
    th = thresholds or Thresholds()
    col = Collect()
    got = gather.read(gather.plan(names), th, [col])
    assert not got.errors, got.errors
    return col.events


class Shown(NamedTuple):
    """A verdict as a surface shows it."""

    kind: str
    severity: str
    text: str


def prometheus_verdicts(series: Series) -> dict[tuple[str, str, str], list[Shown]]:
    """``ringtrace_run_verdict`` series by (run, rank, dispatch): one each for a finished run; value 1."""
    out: dict[tuple[str, str, str], list[Shown]] = {}
    for (name, labels), value in series.items():
        if name != "ringtrace_run_verdict":
            continue
        lab = dict(labels)
        assert value == 1, lab
        out.setdefault((lab["run"], lab["rank"], lab["dispatch"]), []).append(
            Shown(lab["kind"], lab["severity"], lab["text"]))
    return out


class SpanVerdict(NamedTuple):
    """A root span's verdict: its attributes, and its status (ERROR or not, and the message)."""

    kind: str
    severity: str
    text: str
    error: bool
    message: str


def otlp_verdict(root: ReceivedSpan) -> SpanVerdict:
    a = root.attrs
    return SpanVerdict(a["ringtrace.verdict.kind"], a["ringtrace.verdict.severity"], a["ringtrace.verdict.text"],
                       root.status_code == 2, root.status_message)


def trace_packets(path: Path) -> list[Any]:
    """All packets of a protobuf trace, ``compressed_packets`` expanded in place (the official decoder)."""
    trace = official.Trace()
    trace.ParseFromString(path.read_bytes())
    out: list[Any] = []
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            inner = official.Trace()
            inner.ParseFromString(zlib.decompress(p.compressed_packets))
            assert not any(q.HasField("compressed_packets") for q in inner.packet)
            out.extend(inner.packet)
        else:
            out.append(p)
    return out


class TrackVerdict(NamedTuple):
    """A process's verdict track: its name (the kind in capitals), its one slice's name (the short text), the
    slice's args and the process's labels (the first one; chrome-json: all, joined: it starts with the verdict)."""

    track: str
    short: str
    kind: str
    severity: str
    text: str
    label: str


def perfetto_verdicts(path: Path) -> dict[str, TrackVerdict]:
    """The verdict track of each process of the protobuf trace at ``path``, by process name: the process's
    child track whose slice carries ``verdict_kind`` (exactly one per finished run)."""
    pkts = trace_packets(path)
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in pkts if p.HasField("track_descriptor")}
    procs = {u: d for u, d in tracks.items() if d.HasField("process")}
    out: dict[str, TrackVerdict] = {}
    for p in pkts:
        te = p.track_event
        if not p.HasField("track_event") or te.type != te.TYPE_SLICE_BEGIN or not te.HasField("track_uuid"):
            continue
        args = {a.name: a.string_value for a in te.debug_annotations if a.HasField("string_value")}
        if "verdict_kind" not in args:
            continue
        track = tracks[te.track_uuid]
        proc = procs[track.parent_uuid]
        name = proc.process.process_name
        assert name not in out, f"two verdicts for {name}"
        out[name] = TrackVerdict(track.name, te.name, args["verdict_kind"], args["verdict_severity"],
                                 args["verdict_text"], proc.process.process_labels[0])
    return out


def json_verdicts(path: Path) -> dict[str, TrackVerdict]:
    """:func:`perfetto_verdicts` of a chrome-json trace (threads are tracks, ``X`` the verdict's slice)."""
    evs = json.loads(path.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in evs if e.get("name") == "process_name"}
    labels = {e["pid"]: e["args"]["labels"] for e in evs if e.get("name") == "process_labels"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e.get("name") == "thread_name"}
    out: dict[str, TrackVerdict] = {}
    for e in evs:
        if e["ph"] != "X" or "verdict_kind" not in e.get("args", {}):
            continue
        a, name = e["args"], names[e["pid"]]
        assert name not in out, f"two verdicts for {name}"
        out[name] = TrackVerdict(threads[e["pid"], e["tid"]], e["name"], a["verdict_kind"], a["verdict_severity"],
                                 a["verdict_text"], labels[e["pid"]])
    return out


def cut_copy(src: Path, root: Path, keep: int) -> Path:
    """The first ``keep`` lines of the real file ``src`` (metadata included) as a scene-test run below ``root``
    (``outputs/<its run>_cut/scope_stats/scope_stats.jsonl``): a file cut while scopes were open, so fewer
    records than its metadata promises (``cut_short``)."""
    dst = root / "outputs" / f"{src.parents[1].name}_cut" / "scope_stats" / "scope_stats.jsonl"
    dst.parent.mkdir(parents=True)
    dst.write_bytes(b"".join(src.read_bytes().splitlines(keepends=True)[:keep]))
    return dst


VERDICT_SQL = """
    select p.name process, t.name track, s.name short, s.ts ts, s.dur dur,
           extract_arg(s.arg_set_id, 'debug.verdict_kind') kind,
           extract_arg(s.arg_set_id, 'debug.verdict_severity') severity,
           extract_arg(s.arg_set_id, 'debug.verdict_text') text
    from slice s join process_track t on s.track_id = t.id join process p using (upid)
    where extract_arg(s.arg_set_id, 'debug.verdict_kind') is not null"""
"""Each process's verdict slice in the trace processor (a protobuf trace): process, track, short, ts, dur, kind,
severity, text."""


def trace_processor_verdicts(query: Callable[[str], list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """:data:`VERDICT_SQL` through ``query`` (e.g. ``PerfettoUI.query``: the real trace processor), by process
    name; a process with two verdicts fails."""
    out: dict[str, dict[str, Any]] = {}
    for row in query(VERDICT_SQL):
        assert row["process"] not in out, f"two verdicts for {row['process']}"
        out[row["process"]] = row
    return out
