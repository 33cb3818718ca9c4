"""The Perfetto sinks: every trace is decoded with the official ``perfetto`` package's
``perfetto_trace_pb2`` and replayed by :class:`Model` (TrackEvent semantics: sequences,
incremental state, interning, defaults, per-track slice stacks, counters), then checked against
the reader's own events and summaries.  The real trace processor is in tests/e2e/test_perfetto_ui.py;
the hand-encoded protobuf against Perfetto's descriptors in test_trace_writer.py, beside this file.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, cast

import msgspec
import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as official

from ringtrace.demo import sim
from ringtrace.model.records import (
    RESOURCES,
    Labels,
    Record,
    RunFinished,
    RunProgress,
    RunStarted,
    Scope,
    SinkEvent,
    Source,
    Usage,
)
from ringtrace.sinks import FanOut
from ringtrace.sinks.perfetto import PerfettoDirSink, PerfettoSink, source_hash, trace_file_name
from ringtrace.sinks.perfetto import _layout as layout
from ringtrace.sinks.perfetto import _wire as wire
from ringtrace.sinks.perfetto._layout import process_name
from ringtrace.sinks.perfetto._trace_writer import ProtoTrace
from ringtrace.sinks.perfetto._wire import ARG_NAMES
from ringtrace.sources.paths import find_sources, source_labels
from ringtrace.stages.run import Run
from tests._support.events import read_events, run_events
from tests._support.samples import FAILED, L3, SAMPLE_FILES
from tests._support.scope_stats import encode_lines, meta, rec, with_totals
from tests._support.tmpfs import fill, small_tmpfs
from tests._support.verdicts import trace_packets

Packet = Any  # official.TracePacket


# -- decoding a trace and replaying it ----------------------------------------------------------------


class Slice:
    def __init__(self, track: int, name: str, ts: int, depth: int, args: dict[str, Any]) -> None:
        self.track, self.name, self.ts, self.depth, self.args = track, name, ts, depth, args
        self.end: int | None = None


class Model:
    """TrackEvent semantics, enough for these traces; asserts what Perfetto requires along the way."""

    def __init__(self, pkts: list[Packet]) -> None:
        self.tracks: dict[int, Any] = {}
        self.slices: list[Slice] = []
        self.counters: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.max_extra = 0
        stacks: dict[int, list[Slice]] = defaultdict(list)
        seqs: dict[int, dict[str, Any]] = {}
        events: list[tuple[int, int, Packet, dict[str, Any]]] = []
        for i, p in enumerate(pkts):
            seq_id = p.trusted_packet_sequence_id
            if p.sequence_flags & official.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
                seqs[seq_id] = {"names": {}, "ann": {}, "defaults": None}
            st = seqs.get(seq_id)
            if p.HasField("interned_data"):
                assert st is not None, "interned data before the sequence was cleared"
                for n in p.interned_data.event_names:
                    st["names"][n.iid] = n.name
                for n in p.interned_data.debug_annotation_names:
                    st["ann"][n.iid] = n.name
            if p.HasField("trace_packet_defaults"):
                assert st is not None
                st["defaults"] = p.trace_packet_defaults.track_event_defaults
            if p.HasField("track_descriptor"):
                d = p.track_descriptor
                assert d.uuid not in self.tracks, f"track {d.uuid} described twice"
                self.tracks[d.uuid] = d
            elif p.HasField("track_event"):
                assert st is not None and p.HasField("timestamp")
                events.append((p.timestamp, i, p, st))
        last_ts: dict[int, int] = {}
        for ts, _i, p, st in events:
            te = p.track_event
            seq = p.trusted_packet_sequence_id
            assert ts >= last_ts.get(seq, 0), "timestamps go back within a sequence"
            last_ts[seq] = ts
            track = te.track_uuid if te.HasField("track_uuid") else st["defaults"].track_uuid
            name = st["names"][te.name_iid] if te.HasField("name_iid") else te.name
            args = {(a.name if a.HasField("name") else st["ann"][a.name_iid]): getattr(a, a.WhichOneof("value"))
                    for a in te.debug_annotations}
            defaults = st["defaults"]  # a sequence without defaults (the WEDGED track) names its track
            extra = list(te.extra_counter_track_uuids) or (list(defaults.extra_counter_track_uuids) if defaults else [])
            if not te.extra_counter_values:  # events without values record no counters
                extra = []
            assert len(extra) == len(te.extra_counter_values) <= wire.MAX_EXTRA_COUNTERS
            self.max_extra = max(self.max_extra, len(extra))
            for uuid, value in zip(extra, te.extra_counter_values, strict=True):
                self.counters[uuid].append((ts, value))
            stack = stacks[track]
            if te.type == te.TYPE_SLICE_BEGIN:
                s = Slice(track, name, ts, len(stack), args)
                stack.append(s)
                self.slices.append(s)
            elif te.type == te.TYPE_SLICE_END:
                assert stack, f"end without a begin on track {track} at {ts}"
                s = stack.pop()
                s.end = ts
                s.args.update(args)
            elif te.type == te.TYPE_INSTANT:
                s = Slice(track, name, ts, len(stack), args)
                s.end = ts
                self.slices.append(s)
            elif te.type == te.TYPE_COUNTER:
                self.counters[track].append((ts, te.counter_value))
        self.open = [s for st_ in stacks.values() for s in st_]

    @property
    def scopes(self) -> list[Slice]:
        """The slices of the ring tracks (scopes and WEDGED instants), not the verdict's."""
        return [sl for sl in self.slices if "verdict_kind" not in sl.args]

    def named(self, prefix: str) -> dict[str, int]:
        return {d.name: uuid for uuid, d in self.tracks.items() if d.name.startswith(prefix)}

    def processes(self) -> dict[str, Any]:
        return {d.process.process_name: d for d in self.tracks.values() if d.HasField("process")}

    def children(self, proc_uuid: int) -> dict[str, int]:
        return {d.name: uuid for uuid, d in self.tracks.items() if d.parent_uuid == proc_uuid}


def write(events: Sequence[SinkEvent], path: Path, **kw: Any) -> Model:
    sink = PerfettoSink(path, **kw)
    for ev in events:
        sink.receive(ev)
    sink.flush(math.inf)
    sink.close()
    return Model(trace_packets(path))


def check(model: Model, events: Sequence[SinkEvent]) -> None:
    """The trace says what the reader said, source by source."""
    procs = model.processes()
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert sorted(procs) == sorted(process_name(f.source) for f in finished)
    assert model.open == [], "slices left open"
    assert 0 < model.max_extra <= wire.MAX_EXTRA_COUNTERS
    for fin in finished:
        s = fin.summary
        src = fin.source
        proc = procs[process_name(src)]
        children = model.children(proc.uuid)
        ring_tracks = {int(n.split()[1]): u for n, u in children.items()
                       if n.startswith("ring ") and " scopes (1 ns = 1 record)" in n}
        mine = [sl for sl in model.slices if sl.track in ring_tracks.values()]
        slices = [sl for sl in mine if sl.name != "WEDGED"]
        progress = [e for e in events if isinstance(e, RunProgress) and e.source == src]
        records = [r for e in progress for r in e.records]
        scopes = {sc.begin_line: sc for e in progress for sc in e.events if isinstance(sc, Scope)}
        begins = {r.line: r for r in records if r.phase == "begin"}
        # one slice per begin record: paired + unmatched begins + left open (wedged, or the run was cut)
        assert len(slices) == len(begins) == s.scopes + s.unmatched_begins + len(s.open)
        assert sum(1 for sl in mine if sl.name == "WEDGED") == (1 if s.wedged else 0)
        assert sum(1 for sl in slices if sl.args.get("wedged")) == len(s.wedged)
        assert sum(1 for sl in slices if sl.args.get("unmatched_begin")) == s.unmatched_begins
        assert max((sl.args["depth"] for sl in slices), default=0) == (s.max_depth if slices else 0)
        for sl in slices:
            b = begins[sl.ts]  # time axis: ts is the begin record's line
            assert (sl.name, sl.args["depth"], sl.args["line"]) == (b.site, b.depth, b.line)
            assert ring_tracks[b.ring] == sl.track, "slice on another ring's track"
            sc = scopes.get(sl.ts)
            if sc is not None:
                assert sl.end == sc.end_line
                for res, u in zip(RESOURCES, sc.usage, strict=True):
                    if u is None:
                        assert f"{res}_alloc" not in sl.args
                    else:
                        assert (sl.args[f"{res}_high_water"], sl.args[f"{res}_live_at_exit"],
                                sl.args[f"{res}_alloc"]) == (u.high_water, u.live_at_exit, u.alloc)
            else:
                assert sl.args.get("wedged") or sl.args.get("unmatched_begin") or sl.args.get("open_at_close")
                assert sl.end is not None and sl.end > sl.ts
        # nesting on each ring's track: depth - ring for ring = min(depth, 3) files
        if all(r.ring == min(r.depth, 3) for r in records):
            assert all(sl.depth == sl.args["depth"] - int(model.tracks[sl.track].name.split()[1]) for sl in slices)
        if s.wedged:
            w = next(sl for sl in mine if sl.name == "WEDGED")
            inner = s.wedged[-1]
            assert w.ts == records[-1].line + 1 and w.args["line"] == inner.line
            assert w.args.get("orch_error_code") == fin.verdict.code  # as the verdict names it
            innermost = next(sl for sl in slices if sl.ts == inner.line)
            assert w.track == innermost.track and w.depth == innermost.depth + 1
        # counters: every record of a ring, live = head - tail, at the record's line
        by_ring: dict[int, list[Record]] = defaultdict(list)
        for r in records:
            by_ring[r.ring].append(r)
        for ring, recs in by_ring.items():
            for res in RESOURCES:
                names = [n for n in children if n.startswith(f"ring {ring} {res} (cap ")]
                if recs[0].dep_pool_end is None and res == "dep_pool":
                    assert names == []
                    continue
                assert len(names) == 1
                d = model.tracks[children[names[0]]]
                unit = d.counter.UNIT_SIZE_BYTES if res == "heap" else d.counter.UNIT_COUNT
                assert d.counter.unit == unit
                cap = s.meta.capacity(res, ring) if s.meta else None
                assert f"capacity {cap if cap is not None else 'unknown'} " in d.description
                want = [(r.line, getattr(r, f"{res}_end") - getattr(r, f"{res}_start")) for r in recs]
                assert model.counters[children[names[0]]] == want, (src.name, ring, res)
                pct = [n for n in children if n.startswith(f"ring {ring} {res} use % (of ")]
                caps = [s.meta.capacity(q, ring) if s.meta else None for q in RESOURCES
                        if q != "dep_pool" or recs[0].dep_pool_end is not None]
                if all(c is not None for c in caps):  # use % beside the absolute counter, 0-100
                    assert len(pct) == 1 and cap is not None
                    assert model.counters[children[pct[0]]] == [(line, 100 * v // cap) for line, v in want]
                else:
                    assert pct == []
        # the verdict on a track of its own, first, named by its kind, with one slice named by its short text:
        # from the wedged begin (a wedge) or the first line to the end
        v = fin.verdict
        vt = children[layout.verdict_kind(v)]
        assert model.tracks[vt].sibling_order_rank == -1 and v.text in model.tracks[vt].description
        [vs] = [sl for sl in model.slices if sl.track == vt]
        assert (vs.name, vs.args["verdict_kind"], vs.args["verdict_severity"], vs.args["verdict_text"]) == (
            v.short, v.kind, v.severity, v.text)
        assert vs.args.get("orch_error_code") == v.code
        end = (records[-1].line if records else 1) + 1
        assert (vs.ts, vs.end) == ((s.wedged[-1].line, end) if s.wedged else (1, max(end, 2)))
        assert [n for n in children if model.tracks[children[n]].sibling_order_rank == -1] == [layout.verdict_kind(v)]
        tm = [u for n, u in children.items() if n.startswith("tensormap (cap ")]
        assert len(tm) == 1 and model.counters[tm[0]] == [(r.line, r.tensormap) for r in records]
        labels = list(proc.process.process_labels)
        assert labels[0] == layout.verdict_title(v)  # the verdict first, as summary says it
        assert any(lab.startswith("WEDGED") for lab in labels) == bool(s.wedged)
        assert f"verdict {v.kind} ({v.severity}): {v.text}" in proc.description
        assert any(lab.startswith("INCOMPLETE") for lab in labels) == (not s.complete)
        assert ("FATAL" in labels) == bool(s.meta and s.meta.fatal)
        assert "1 ns = 1 boundary record" in proc.description


# -- real samples -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: "/".join(p.parts[-6:-3]))
def test_each_sample(path: Path, tmp_path: Path) -> None:
    events = read_events([path])
    check(write(events, tmp_path / "t.pftrace"), events)


def test_l3_merge_and_failed_runs_in_one_trace(tmp_path: Path) -> None:
    events = read_events([L3, FAILED])
    model = write(events, tmp_path / "all.pftrace")
    check(model, events)
    procs = model.processes()
    assert len(procs) == 4
    by_pid = sorted(procs.values(), key=lambda d: d.process.pid)
    assert [d.process.pid for d in by_pid] == [1, 2, 3, 4]
    l3 = [d.process.process_name for d in by_pid if d.process.process_name.startswith("rank")]
    assert l3 == ["rank0/d0 nested_l3", "rank1/d1 nested_l3"]  # ranks first, in rank order
    assert [d.sibling_order_rank for d in by_pid] == [1, 2, 3, 4]


# -- small synthetic inputs ---------------------------------------------------------------------------


def events_of(path: Path, source: Source | None = None) -> list[SinkEvent]:
    run = Run(source or Source(str(path), source_labels(path)))
    return [*run.feed(path.read_bytes()), *run.finish("eof")]


def test_unmatched_begin_and_end(write_jsonl: Any, tmp_path: Path) -> None:
    path = write_jsonl(with_totals([
        rec("(unknown):0", "begin", 0),
        rec("a.cpp:1", "begin", 1, tw=(0, 1)),
        rec("b.cpp:2", "begin", 2, tw=(0, 0)),
        rec("c.cpp:3", "begin", 1, tw=(0, 2)),  # abandons b (depth 2) and a (depth 1)
        rec("x.cpp:9", "end", 2),  # unmatched end: no slice, counters still recorded
        rec("c.cpp:3", "end", 1, tw=(1, 3), heap=(0, 512)),
        rec("(unknown):0", "end", 0),
    ]))
    events = events_of(path)
    fin = events[-1]
    assert isinstance(fin, RunFinished) and fin.summary.unmatched_begins == 2 and fin.summary.unmatched_ends == 1
    model = write(events, tmp_path / "u.pftrace")
    check(model, events)
    ends = {sl.name: (sl.ts, sl.end, sl.args.get("unmatched_begin")) for sl in model.scopes}
    assert ends["a.cpp:1"] == (3, 5, True) and ends["b.cpp:2"] == (4, 5, True)
    assert ends["c.cpp:3"] == (5, 7, None)


def test_v4_file_has_no_dep_pool(write_jsonl: Any, tmp_path: Path) -> None:
    path = write_jsonl(with_totals([
        rec("(unknown):0", "begin", 0, dp=None),
        rec("a.cpp:1", "begin", 1, dp=None, heap=(0, 100)),
        rec("a.cpp:1", "end", 1, dp=None, heap=(50, 300)),
        rec("(unknown):0", "end", 0, dp=None),
    ], version=4, heap=1024))
    events = events_of(path)
    model = write(events, tmp_path / "v4.pftrace")
    check(model, events)
    assert not any("dep_pool" in n for n in model.named("ring"))
    assert model.max_extra == 5  # task window, heap, tensormap, and the two use-% counters


@pytest.mark.parametrize("total", [5, 6])
def test_wedged_or_cut_run_and_fatal(write_jsonl: Any, tmp_path: Path, total: int) -> None:
    """Every record read and scopes left open: wedged; one record missing: cut short, its open scopes drawn
    ``open_at_close``.  Either way the verdict says it, first, and the facts (fatal, incomplete) follow."""
    path = write_jsonl([meta(total=total, fatal=True),
                        rec("(unknown):0", "begin", 0), rec("a.cpp:1", "begin", 1), rec("b.cpp:2", "begin", 2),
                        rec("c.cpp:3", "begin", 3), rec("d.cpp:4", "begin", 4)])
    events = events_of(path)
    fin = events[-1]
    assert isinstance(fin, RunFinished) and fin.verdict.kind == ("wedged" if total == 5 else "cut_short")
    model = write(events, tmp_path / "w.pftrace")
    check(model, events)
    assert all(sl.end == 7 for sl in model.slices)
    assert all(sl.args.get("wedged" if total == 5 else "open_at_close") for sl in model.scopes if sl.name != "WEDGED")
    proc = next(iter(model.processes().values()))
    labels = list(proc.process.process_labels)
    assert labels[0] == ("WEDGED d.cpp:4, ring 3 task_window" if total == 5 else "CUT SHORT")
    assert "FATAL" in labels
    assert any(lab.startswith("INCOMPLETE 5 of 6") for lab in labels) == (total == 6)


def test_unfinished_runs_are_closed_at_close(write_jsonl: Any, tmp_path: Path) -> None:
    path = write_jsonl(with_totals([rec("(unknown):0", "begin", 0), rec("a.cpp:1", "begin", 1)]))
    events = [e for e in events_of(path) if not isinstance(e, RunFinished)]
    model = write(events, tmp_path / "open.pftrace")
    assert [sl.args.get("open_at_close") for sl in model.scopes] == [True, True]
    assert any("UNFINISHED" in lab for lab in next(iter(model.processes().values())).process.process_labels)


@pytest.mark.parametrize("reason", ["shutdown", "deleted"])
@pytest.mark.parametrize("fmt", ["proto", "chrome-json"])
def test_a_run_ended_without_wedging_is_not_called_wedged(write_jsonl: Any, tmp_path: Path, reason: Any,
                                                          fmt: Literal["proto", "chrome-json"]) -> None:
    """The open slices of a run ended by shutdown or a deleted file follow the pairer's open scopes and the
    summary's verdict: ``open_at_close``, no WEDGED instant or label (a wedged run: tests above)."""
    path = write_jsonl(with_totals([rec("(unknown):0", "begin", 0), rec("a.cpp:1", "begin", 1),
                                    rec("b.cpp:2", "begin", 2)]))
    run = Run(Source(str(path)))
    events = [*run.feed(path.read_bytes()), *run.finish(reason)]
    fin = events[-1]
    assert isinstance(fin, RunFinished) and fin.summary.wedged == () and len(fin.summary.open) == 3
    out = tmp_path / ("t.pftrace" if fmt == "proto" else "t.json")
    if fmt == "proto":
        model = write(events, out)
        assert model.open == [] and [sl.args.get("open_at_close") for sl in model.scopes] == [True] * 3
        assert not any(sl.name == "WEDGED" or sl.args.get("wedged") for sl in model.scopes)
        labels = next(iter(model.processes().values())).process.process_labels
    else:
        sink = PerfettoSink(out, "chrome-json")
        for ev in events:
            sink.receive(ev)
        sink.close()
        evs = json.loads(out.read_text())["traceEvents"]
        ends = [e for e in evs if e["ph"] == "E"]
        assert [(e["args"]["line"], e["args"].get("open_at_close")) for e in ends] == [(4, True), (3, True), (2, True)]
        assert not any(e.get("name") == "WEDGED" or "wedged" in e.get("args", {}) for e in evs)
        labels = [e["args"]["labels"] for e in evs if e.get("name") == "process_labels"]
    assert not any("WEDGED" in lab for lab in labels)


def test_begin_and_end_on_different_rings(write_jsonl: Any, tmp_path: Path) -> None:
    """Odd data: the pairer pairs by depth and site; the slice still ends on its own track."""
    path = write_jsonl(with_totals([rec("a.cpp:1", "begin", 1, ring=1), rec("a.cpp:1", "end", 1, ring=2)]))
    model = write(events_of(path), tmp_path / "odd.pftrace")
    assert [(sl.ts, sl.end) for sl in model.scopes] == [(2, 3)]
    assert model.open == []


# -- streaming, atomic writes, the directory sink ------------------------------------------------------


def test_atomic_and_streaming(tmp_path: Path) -> None:
    events = read_events([L3])
    path = tmp_path / "s.pftrace"
    sink = PerfettoSink(path)
    out = sink._out
    assert out is not None and out.tf is not None
    out.tf.batch = 4096  # small batches: the sink must spill as it goes
    tmp = path.with_suffix(".pftrace.tmp")
    for ev in events:
        sink.receive(ev)
        assert not path.exists() and tmp.exists()
        assert sum(map(len, out.tf.parts)) < 4096 + 1024  # bounded: one batch, not the trace
        assert isinstance(out.enc, ProtoTrace)
        assert all(len(r.open) <= 8 for r in out.enc.runs.values())  # the pairer's open scopes: O(depth)
    sink.flush(math.inf)
    assert not path.exists() and tmp.stat().st_size > 10_000  # streamed to disk before close
    sink.close()
    assert path.exists() and not tmp.exists()
    check(Model(trace_packets(path)), events)


def test_write_error_is_raised_from_close(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        PerfettoSink(tmp_path / "missing" / "x.pftrace")
    sink = PerfettoSink(tmp_path / "x.pftrace")
    assert sink._out is not None and sink._out.tf is not None
    assert sink._out.tf._fh is not None
    sink._out.tf._fh.close()
    sink._out.tf._fh = cast(Any, open("/dev/full", "wb", buffering=0))  # noqa: SIM115  # disk full: ENOSPC
    sink._out.tf.batch = 1
    for ev in read_events([L3]):
        sink.receive(ev)  # never raises into the reader
    sink.flush(math.inf)  # the deflate worker's error surfaces here (or at the next receive)
    assert isinstance(sink.error, OSError)
    with pytest.raises(OSError):
        sink.close()
    assert not (tmp_path / "x.pftrace").exists() and not (tmp_path / "x.pftrace.tmp").exists()


def test_dir_sink_names_and_atomic_writes(tmp_path: Path) -> None:
    events = read_events([L3, FAILED])
    out = tmp_path / "traces"
    sink = PerfettoDirSink(out)
    seen: set[str] = set()
    for ev in events:
        sink.receive(ev)
        final = {p.name for p in out.glob("*.pftrace")}
        if isinstance(ev, RunFinished):
            name = trace_file_name(ev.source)
            assert name in final and name not in seen
            seen.add(name)
            check(Model(trace_packets(out / name)), [e for e in events if e.source == ev.source])
        assert final == seen  # nothing appears before its run finished
        assert open_files(out) == []  # open runs hold no file descriptor between events
    sink.close()
    stems = {n.rsplit("-", 1)[0] for n in seen}  # without the path hash
    assert stems == {"nested_l3_20261130_102011-rank0-d0", "nested_l3_20261130_102011-rank1-d1",
                     "HeapRingDeadlock", "NestedScopes_window4_flow_control_deadlock"}
    assert list(out.glob("*.tmp")) == []
    pids = {n.rsplit("-", 1)[0]: Model(trace_packets(out / n)).processes() for n in seen}
    assert [d.process.pid for d in pids["nested_l3_20261130_102011-rank1-d1"].values()] == [2]


def open_files(directory: Path) -> list[str]:
    """Files under ``directory`` this process has open (Linux /proc)."""
    out = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith(str(directory)):
            out.append(target)
    return out


def test_dir_sink_removes_the_temp_files_a_killed_process_left(tmp_path: Path) -> None:
    """A process killed mid-run leaves ``<name>.tmp``; the next one removes those (and only those)."""
    out = tmp_path / "traces"
    events = read_events([L3])
    first = PerfettoDirSink(out)
    for ev in events:
        if isinstance(ev, RunFinished):
            break
        first.receive(ev)
    left = sorted(p.name for p in out.glob("*.tmp"))
    assert left and all(n.endswith(".pftrace.tmp") for n in left)  # what a kill -9 here leaves
    (out / "notes.tmp").write_text("not ours")
    (out / "done.pftrace").write_bytes(b"")
    second = PerfettoDirSink(out)
    assert sorted(p.name for p in out.iterdir()) == ["done.pftrace", "notes.tmp"]
    for ev in events:
        second.receive(ev)
    second.close()
    assert len(list(out.glob("*-*.pftrace"))) == len([e for e in events if isinstance(e, RunFinished)])


def test_dir_sink_chrome_json(tmp_path: Path) -> None:
    events = read_events([L3, FAILED])
    sink = PerfettoDirSink(tmp_path, "chrome-json")
    for ev in events:
        sink.receive(ev)
        assert open_files(tmp_path) == []
    sink.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(trace_file_name(f.source, "chrome-json") for f in events if isinstance(f, RunFinished))
    for n in names:
        doc = json.loads((tmp_path / n).read_text())
        assert sum(1 for e in doc["traceEvents"] if e["ph"] == "B") > 0


def test_trace_file_names() -> None:
    src = Source("/x/run/dfx_outputs/rank3/d2/scope_stats/scope_stats.jsonl", Labels(run="run", rank="3", dispatch="2"),
                 4)
    assert trace_file_name(src) == f"run-rank3-d2-g4-{source_hash(src)}.pftrace"
    assert trace_file_name(Source("/a b/c.jsonl"), "chrome-json") == f"a_b_c-{source_hash(Source('/a b/c.jsonl'))}.json"
    assert trace_file_name(Source("/x/y", Labels(run="we/ird:name"))).startswith("we_ird_name-")
    assert re.fullmatch(r"[0-9a-f]{8}", source_hash(src))


def test_trace_file_names_are_unique_per_source_and_safe() -> None:
    a = Source("/root1/build/dfx_outputs/rank0/d0/scope_stats/scope_stats.jsonl", Labels(run="build", rank="0",
                                                                                          dispatch="0"))
    b = Source("/root2/build/dfx_outputs/rank0/d0/scope_stats/scope_stats.jsonl", a.labels)
    assert trace_file_name(a) != trace_file_name(b)
    assert trace_file_name(a) == trace_file_name(Source(a.path, a.labels))  # stable across restarts
    odd = Source("/t/caf\udce9/x" + "/y" * 200 + ".jsonl", Labels(run="r\udcff", rank="9" * 30))
    name = trace_file_name(odd)  # a non-UTF-8 directory name, a huge rank, a long path
    assert len(name) <= 210 and name.isascii() and name.endswith(f"-{source_hash(odd)}.pftrace")


def test_dir_sink_counts_an_unwritable_directory_through_the_fanout(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sink = PerfettoDirSink(blocker / "sub")
    fanout = FanOut([sink])
    events = read_events([L3])
    fanout.receive_all(events)
    fanout.flush(math.inf)
    fanout.close()
    runs = sum(isinstance(e, RunFinished) for e in events)
    assert fanout.errors["perfetto-dir"] == runs == sink.errors == 2  # once per run, never per event
    assert sink.written == []



def test_started_events_only_make_no_slices(tmp_path: Path) -> None:
    src = Source("/x/scope_stats.jsonl")
    model = write([RunStarted(src, None)], tmp_path / "e.pftrace")
    assert model.slices == [] and len(model.processes()) == 1
    assert ARG_NAMES[0] == "depth"


def test_scope_without_task_window_usage(tmp_path: Path) -> None:
    """Scopes not made by the pairer may lack figures: the slow path writes what is there."""
    src = Source("/x/scope_stats.jsonl")

    def record(line: int, phase: str) -> Record:
        return Record(line, "a.cpp:1", phase, 1, 1, 0, 1, 0, 4096, None, None, 2)  # type: ignore[arg-type]

    scope = Scope("a.cpp:1", 1, 1, 2, 3, 0, (None, Usage(70000, 5, 1 << 40), None))
    events: list[SinkEvent] = [RunStarted(src, None),
                               RunProgress(src, (record(2, "begin"), record(3, "end")), (scope,), ())]
    model = write(events, tmp_path / "slow.pftrace")
    [sl] = model.scopes
    assert (sl.args["heap_high_water"], sl.args["heap_live_at_exit"], sl.args["heap_alloc"]) == (70000, 5, 1 << 40)
    assert "task_window_alloc" not in sl.args and sl.end == 3


# -- faults: huge ranks, a full disk, runs labelled alike ----------------------------------------------



def test_dir_sink_writes_a_run_whose_rank_is_too_large_for_a_pid(write_jsonl: Any, tmp_path: Path) -> None:
    path = write_jsonl(with_totals([rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 2))]))
    sink = PerfettoDirSink(tmp_path / "traces")
    fanout = FanOut([sink])
    ranks = ["99999999999", "3"]
    for rank in ranks:
        fanout.receive_all(run_events(path, Source(str(path), Labels(run="r", rank=rank))))
    fanout.close()
    assert fanout.errors["perfetto-dir"] == 0 and len(sink.written) == 2
    pids = [[d.process.pid for d in Model(trace_packets(p)).processes().values()] for p in sink.written]
    assert pids == [[1 + 99999999999 % layout.PID_MAX], [4]]


def test_runs_labelled_alike_under_different_roots_get_their_own_files(tmp_path: Path) -> None:
    """Two roots holding the same build (the same run/rank/dispatch labels), followed at once."""
    for root in ("root1", "root2"):
        shutil.copytree(L3, tmp_path / root / L3.name)
    streams = []
    for root in ("root1", "root2"):
        files, _ = find_sources([str(tmp_path / root)])
        streams += [run_events(f, Source(str(f), source_labels(f)), chunk=1024) for f in files]
    sink = PerfettoDirSink(tmp_path / "traces")
    fanout = FanOut([sink])
    for step in itertools.zip_longest(*streams):  # interleaved, as concurrent runs arrive
        fanout.receive_all(ev for ev in step if ev is not None)
    fanout.close()
    assert fanout.errors["perfetto-dir"] == 0
    assert len(set(sink.written)) == len(streams) == 4
    for events in streams:
        fin = events[-1]
        assert isinstance(fin, RunFinished)
        check(Model(trace_packets(sink.directory / trace_file_name(fin.source))), events)


@pytest.fixture
def big_run(tmp_path: Path) -> tuple[Path, list[SinkEvent]]:
    """A run whose trace (~100 KB, in batches of ~24 KB) does not fit a small disk, read in many progress events."""
    path = tmp_path / "in" / "big" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    sim.generate_bytes(1 << 20, 3)(path)
    events = run_events(path, Source(str(path), Labels(run="big")))
    assert sum(isinstance(e, RunProgress) for e in events) > 20
    return path, events


def test_dir_sink_on_a_full_disk_counts_each_failed_run_and_never_publishes_a_partial_trace(
        tmp_path: Path, big_run: tuple[Path, list[SinkEvent]]) -> None:
    _, big = big_run
    small = read_events([L3])
    later = read_events([FAILED])
    with small_tmpfs(tmp_path / "mnt", "128k") as mnt:  # the L3 traces take ~52 KiB, the big one ~100
        sink = PerfettoDirSink(mnt / "traces")
        fanout = FanOut([sink])
        fanout.receive_all(small)  # fits
        assert len(sink.written) == 2 and fanout.errors["perfetto-dir"] == 0
        tmp = sink.directory / (trace_file_name(big[0].source) + ".tmp")
        grew = 0
        rest = iter(big)
        for ev in rest:
            fanout.receive(ev)
            if fanout.errors["perfetto-dir"]:
                break
            grew = max(grew, tmp.stat().st_size if tmp.exists() else 0)
        assert fanout.errors["perfetto-dir"] == 1 and grew > 0  # failed mid-run, after batches were written
        assert not tmp.exists()  # discarded at once: its space is free again
        filler = fill(mnt, free=0)
        filler.unlink()  # space again: the rest of the run must still not produce a (truncated) trace
        fanout.receive_all(rest)
        assert not (sink.directory / trace_file_name(big[0].source)).exists() and not tmp.exists()
        assert fanout.errors["perfetto-dir"] == 1  # one failure, one count: not one per later event
        fanout.receive_all(later)  # the sink carries on with the next runs
        fanout.close()
        names = sorted(p.name for p in sink.directory.iterdir())
        assert names == sorted(p.name for p in sink.written) and not any(n.endswith(".tmp") for n in names)
        assert len(sink.written) == 2 + sum(isinstance(e, RunFinished) for e in later)
        everything = small + later
        for p in sink.written:  # every published trace is whole
            src = next(e.source for e in everything
                       if isinstance(e, RunFinished) and trace_file_name(e.source) == p.name)
            check(Model(trace_packets(p)), [e for e in everything if e.source == src])


@pytest.mark.parametrize("fmt", ["proto", "chrome-json"])
def test_dir_sink_failures_at_flush_and_close_are_each_counted(tmp_path: Path, big_run: tuple[Path, list[SinkEvent]],
                                                               fmt: Literal["proto", "chrome-json"]) -> None:
    """Runs still open when the disk is full: every one whose trace is lost counts."""
    path, big = big_run
    other = [ev for ev in run_events(path, Source(str(path) + "2", Labels(run="big2")))
             if not isinstance(ev, RunFinished)]
    open_only = [ev for ev in big if not isinstance(ev, RunFinished)]
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        sink = PerfettoDirSink(mnt / "traces", fmt)
        fanout = FanOut([sink])
        fanout.receive_all(open_only[:3] + other[:3])  # two runs open, a little written (proto)
        fill(mnt, free=0)
        fanout.flush(math.inf)
        fanout.close()
        assert fanout.errors["perfetto-dir"] == 2 == sink.errors
        assert sink.written == [] and list(sink.directory.iterdir()) == []


def test_the_fanout_count_is_the_prometheus_sink_errors_metric(tmp_path: Path) -> None:
    from prometheus_client.exposition import generate_latest

    from ringtrace.sinks.prometheus import PrometheusSink

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    sink = PerfettoDirSink(blocker / "traces")
    fanout = FanOut([sink])
    prom = PrometheusSink(sink_errors=lambda: fanout.errors)
    fanout.add(prom)
    fanout.receive_all(read_events([L3]))
    text = generate_latest(prom.registry).decode()
    assert 'ringtrace_sink_errors_total{sink="perfetto-dir"} 2.0' in text


def test_watch_on_a_full_disk_counts_and_reports_the_perfetto_failures(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(L3, tree / L3.name)
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        fill(mnt, free=0)
        r = subprocess.run([sys.executable, "-m", "ringtrace", "watch", "--once", str(tree), "--perfetto-dir",
                            str(mnt / "traces")], capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        assert r.stderr.count("sink perfetto-dir failed in receive: ") == 2  # one log line per lost trace
        assert "No space left on device" in r.stderr and "the trace is discarded" in r.stderr
        assert "sink perfetto-dir failed 2 time(s)" in r.stderr
        assert list((mnt / "traces").iterdir()) == []


def _not_utf8_run(tmp_path: Path) -> tuple[Path, list[SinkEvent]]:
    raw = os.fsencode(tmp_path) + b"/caf\xe9/scope_stats/scope_stats.jsonl"
    path = Path(os.fsdecode(raw))
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(with_totals([rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 2))])))
    return path, run_events(path, Source(str(path), Labels(run=os.fsdecode(b"caf\xe9"))))


@pytest.mark.parametrize("fmt", ["proto", "chrome-json"])
def test_a_path_that_is_not_utf8_is_written(tmp_path: Path, fmt: Literal["proto", "chrome-json"]) -> None:
    _, events = _not_utf8_run(tmp_path)
    sink = PerfettoDirSink(tmp_path / "traces", fmt)
    fanout = FanOut([sink])
    fanout.receive_all(events)
    fanout.close()
    assert fanout.errors["perfetto-dir"] == 0 and len(sink.written) == 1
    if fmt == "proto":
        (proc,) = Model(trace_packets(sink.written[0])).processes().values()
        assert proc.process.process_name == "caf\ufffd" and "caf\ufffd/scope_stats" in proc.description


def test_convert_of_a_path_that_is_not_utf8(tmp_path: Path) -> None:
    _, events = _not_utf8_run(tmp_path)
    model = write(events, tmp_path / "t.pftrace")
    assert list(model.processes()) == ["caf\ufffd"]


def test_an_encoding_error_mid_run_discards_the_trace_and_is_counted(tmp_path: Path) -> None:
    """A bug (here: an event carrying a figure beyond int64, which the reader never sends) is not
    a write error, and still never leaves a partial trace in place."""
    events = read_events([L3])
    first = next(i for i, e in enumerate(events) if isinstance(e, RunProgress)
                 and any(isinstance(x, Scope) for x in e.events))
    prog = events[first]
    assert isinstance(prog, RunProgress)
    k = next(i for i, x in enumerate(prog.events) if isinstance(x, Scope))
    scope = prog.events[k]
    assert isinstance(scope, Scope) and scope.usage[0] is not None
    bad = msgspec.structs.replace(scope, usage=(msgspec.structs.replace(scope.usage[0], alloc=1 << 70),
                                                *scope.usage[1:]))
    events[first] = msgspec.structs.replace(prog, events=(*prog.events[:k], bad, *prog.events[k + 1:]))
    sink = PerfettoDirSink(tmp_path / "traces")
    fanout = FanOut([sink])
    fanout.receive_all(events)
    fanout.close()
    assert fanout.errors["perfetto-dir"] == 1
    names = sorted(p.name for p in sink.directory.iterdir())
    assert names == [p.name for p in sink.written] and len(names) == 1  # the other rank's trace only
    assert trace_file_name(prog.source) not in names
