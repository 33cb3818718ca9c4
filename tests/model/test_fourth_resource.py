"""A fourth ring resource is what docs/design.md ("Ring resources") says it is: a row of ``model.runtime.TABLE``,
its two ``Record`` fields, its ``Meta`` field and its ``RingSizes`` field.

Those edits, and no other, are made to a copy of the checkout (its compiled modules, built for three resources,
copied too).  A run whose records and metadata carry the fourth resource's counters, beside a host log whose
sizes line names it, is read there on the pure path (``RINGTRACE_PURE=1``), and the fourth resource's figures
are found in every output: ``summary --format json``, ``check``, ``advise``, the events file, the Prometheus
exposition, the Perfetto trace (native and JSON), OTLP spans at a real receiver and the report page's data; the
compiled modules are never loaded.  Then the C sources' header is written again from the tables
(``make core-header``): the compiled parts' build stops at their ``_Static_assert``, leaves no module built
for three resources behind, and a plain run reads on the pure path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests._support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.slow  # a copy of the checkout and a dozen ringtrace processes in it

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = ("__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".git", ".venv", "build",
            "test-artifacts", "*.egg-info")
NAME = "event_pool"
CAPS = [32, 48, 64, 80]  # per ring
SITE = "kernel_b.cpp:20"  # on ring 2: the fourth resource from 1 to 59, a need of 58 of 64
COMPILED = ("ringtrace.stages._core", "ringtrace.sinks.perfetto._encode")


def replace_once(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, f"{path}: {old!r}"
    path.write_text(text.replace(old, new))


def add_resource(copy: Path) -> None:
    """The documented edits: the row (a resource every v6 file has, counted in events), then its fields."""
    runtime = copy / "ringtrace/model/runtime.py"
    text = runtime.read_text()
    table = text.index("TABLE: tuple[Resource, ...] = (")
    end = text.index("\n)\n", table)
    runtime.write_text(text[:end] + f'\n    Resource("{NAME}", "events", "event-pool entries", "", 1024, 4, 1, '
                       f'"ring_{NAME}", since_version=6),' + text[end:])
    records = copy / "ringtrace/model/records.py"
    replace_once(records, "    dep_pool_max: tuple[int, ...]\n",
                 f"    dep_pool_max: tuple[int, ...]\n    {NAME}_max: tuple[int, ...]\n")
    replace_once(records, "    dep_pool_end: int | None\n",
                 f"    dep_pool_end: int | None\n    {NAME}_start: int | None\n    {NAME}_end: int | None\n")
    replace_once(records, "    dep_pool: tuple[int, ...]\n    line: int = 0\n",
                 f"    dep_pool: tuple[int, ...]\n    {NAME}: tuple[int, ...]\n    line: int = 0\n")


def write_run(folder: Path) -> Path:
    """An L2 work dir: a complete version 6 run (root on ring 0, one scope on each of rings 1 and 2) whose
    records carry the fourth resource's counters (from 1: like the dep pool's), and its host log."""
    def rec(site: str, phase: str, depth: int, tw: int, heap: int, dp: int, ev: int, tm: int) -> dict[str, Any]:
        return {"site": site, "phase": phase, "depth": depth, "ring": depth, "task_window_start": 0,
                "task_window_end": tw, "heap_start": 0, "heap_end": heap, "dep_pool_start": 1, "dep_pool_end": dp,
                f"{NAME}_start": 1, f"{NAME}_end": ev, "tensormap": tm}

    lines = [{"version": 6, "fatal": False, "dropped": 0, "total": 6, "task_window_max": [16] * 4,
              "heap_max": [8192] * 4, "dep_pool_max": [64] * 4, f"{NAME}_max": CAPS, "tensormap_max": 100},
             rec("root.cpp:1", "begin", 0, 0, 0, 1, 1, 0),
             rec("kernel_a.cpp:10", "begin", 1, 0, 0, 1, 1, 1),
             rec("kernel_a.cpp:10", "end", 1, 3, 1024, 5, 31, 2),
             rec(SITE, "begin", 2, 0, 0, 1, 1, 2),
             rec(SITE, "end", 2, 2, 2048, 4, 59, 3),
             rec("root.cpp:1", "end", 0, 1, 512, 2, 7, 3)]
    path = folder / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "host.log").write_text(
        "[mono_ns=1000000][T0x7f00][INFO] resolve_arena_sizing: [runtime_maker.cpp:546] Ring buffer sizes: "
        f"task_window=[16, 16, 16, 16] heap=[8192, 8192, 8192, 8192] dep_pool=[64, 64, 64, 64] {NAME}={CAPS}\n")
    return path


def copy_checkout(into: Path) -> Path:
    def left_out(folder: str, names: list[str]) -> set[str]:
        skip = set(shutil.ignore_patterns(*LEFT_OUT)(folder, names))
        return skip | ({"data"} if Path(folder) == ROOT / "tests" / "bench" else set())  # the benchmarks' files

    copy = into / "checkout"
    shutil.copytree(ROOT, copy, ignore=left_out)
    return copy


# The exporters with no one-shot command (the Prometheus exposition, the events file) through the golden cases'
# helpers, and the compiled modules loaded by then (none on the pure path).
DRIVER = f"""
import json, sys
from pathlib import Path
from tests._support.golden import case_events, events_file, prometheus
events = case_events(Path(sys.argv[1]), ["."])
print(json.dumps({{"prom": prometheus(events), "events": events_file(events),
                   "loaded": sorted(m for m in sys.modules if m in {COMPILED!r})}}))
"""


class Copy:
    """Commands run in the copy with this interpreter and packages (its ``ringtrace`` first on the path), on the
    pure path unless ``pure`` is False."""

    def __init__(self, root: Path, pure: bool = True) -> None:
        self.root = root
        self.env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}
        self.env.pop("RINGTRACE_PURE", None)
        if pure:
            self.env["RINGTRACE_PURE"] = "1"

    def run(self, *argv: str | Path, code: int = 0) -> str:
        proc = subprocess.run([sys.executable, *map(str, argv)], cwd=self.root, env=self.env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == code, (argv, proc.stdout[-3000:], proc.stderr[-3000:])
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc.stdout

    def ringtrace(self, *argv: str | Path, code: int = 0) -> str:
        return self.run("-m", "ringtrace", *argv, code=code)


def peaks(summary: str) -> dict[int, dict[str, Any]]:
    [run] = json.loads(summary)["files"]
    return {r["ring"]: r for r in run["rings"] if r["resource"] == NAME}


def trace_packets(path: Path) -> list[Any]:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    out = []
    for packet in pb.Trace.FromString(path.read_bytes()).packet:
        if packet.HasField("compressed_packets"):
            out += pb.Trace.FromString(zlib.decompress(packet.compressed_packets)).packet
        else:
            out.append(packet)
    return out


def check_perfetto(path: Path) -> None:
    """Ring 2's track of the fourth resource (a counter beside the others), its value at the scope's end, and the
    scope's three figures of it as annotations of its slice."""
    packets = trace_packets(path)
    tracks = {p.track_descriptor.name: p.track_descriptor.uuid for p in packets if p.HasField("track_descriptor")}
    assert f"ring 2 {NAME} (cap 64)" in tracks, sorted(tracks)
    [defaults] = [p for p in packets if p.HasField("trace_packet_defaults")
                  and tracks[f"ring 2 {NAME} (cap 64)"] in p.trace_packet_defaults.track_event_defaults
                  .extra_counter_track_uuids]
    counters = list(defaults.trace_packet_defaults.track_event_defaults.extra_counter_track_uuids)
    assert len(counters) <= 8  # Perfetto's limit: with four resources the use-% counters are left out
    names = {a.iid: a.name for a in defaults.interned_data.debug_annotation_names}
    seq = defaults.trusted_packet_sequence_id
    [end] = [p for p in packets if p.trusted_packet_sequence_id == seq and p.timestamp == 6
             and p.HasField("track_event")]
    assert end.track_event.extra_counter_values[counters.index(tracks[f"ring 2 {NAME} (cap 64)"])] == 58
    args = {names[a.name_iid]: a.int_value for a in end.track_event.debug_annotations}
    assert {k: v for k, v in args.items() if k.startswith(NAME)} == {
        f"{NAME}_high_water": 58, f"{NAME}_live_at_exit": 58, f"{NAME}_alloc": 58}


def test_a_fourth_resource_is_a_row_and_its_fields(tmp_path: Path) -> None:
    copy = Copy(copy_checkout(tmp_path))
    add_resource(copy.root)
    run = write_run(tmp_path / "case" / "input" / "Fourth")
    case = tmp_path / "case"
    assert copy.run("-c", "import ringtrace; print(ringtrace.__file__)").startswith(str(copy.root))

    # summary: the peaks of every ring, the verdict (the fourth resource is the one near capacity), the host log
    summary = copy.ringtrace("summary", "--format", "json", case)
    by_ring = peaks(summary)
    assert {k: by_ring[2][k] for k in ("capacity", "high_water", "high_water_site", "live_at_exit", "alloc",
                                       "proven_need")} == {
        "capacity": 64, "high_water": 58, "high_water_site": SITE, "live_at_exit": 58, "alloc": 58, "proven_need": 58}
    assert (by_ring[0]["capacity"], by_ring[1]["capacity"], by_ring[1]["high_water"]) == (32, 48, 30)
    [f] = json.loads(summary)["files"]
    assert (f["verdict"]["kind"], f["verdict"]["ring"], f["verdict"]["resource"]) == ("near_capacity", 2, NAME)
    assert f["host_log"]["ring_sizes"][NAME] == CAPS

    # check: its limit and its expected sizes; advise: its bracket, its advice and its RunConfig field
    out = copy.ringtrace("check", "--max-ratio", "0.9", "--resource", NAME, case, code=1)
    assert f"ring 2 {NAME}: a proven need of 58 is 90.6% of capacity (limit 90%)" in out
    out = copy.ringtrace("check", "--expect", f"{NAME}=(32,48,64,99)", case, code=1)
    assert f"ring 3 {NAME}: expected 99, the metadata says 80" in out
    assert f"ring 3 {NAME}: expected 99, the host log's 'Ring buffer sizes' line says 80" in out
    [program] = json.loads(copy.ringtrace("advise", "--format", "json", case))["programs"]
    [advice] = [a for a in program["advice"] if (a["ring"], a["resource"]) == (2, NAME)]
    assert (advice["lower_bound"], advice["upper_bound"]) == (58, 64) and advice["recommended"] > 64
    assert program["run_config"][f"ring_{NAME}"][2] == advice["recommended"]

    # the events file and the Prometheus exposition, read in one process that never loads a compiled module
    driven = json.loads(copy.run("-c", DRIVER, case))
    assert driven["loaded"] == []
    [finished] = [json.loads(line) for line in driven["events"].splitlines()]
    assert {r["ring"]: r["high_water"] for r in finished["rings"] if r["resource"] == NAME} == {0: 6, 1: 30, 2: 58}
    samples = {(s.name, s.labels.get("ring"), s.labels.get("resource")): s for fam in
               text_string_to_metric_families(driven["prom"]) for s in fam.samples}
    assert samples[("ringtrace_run_sizes_info", None, None)].labels[NAME] == "32,48,64,80"
    assert samples[("ringtrace_ring_high_water_ratio", "2", NAME)].value == 58 / 64
    assert samples[("ringtrace_ring_need_ratio", "2", NAME)].value == 58 / 64

    # Perfetto: the native trace and the JSON one
    copy.ringtrace("convert", case, "-o", tmp_path / "t.pftrace")
    check_perfetto(tmp_path / "t.pftrace")
    copy.ringtrace("convert", case, "--format", "chrome-json", "-o", tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    [counter] = [e for e in events if e["ph"] == "C" and e["ts"] == 6 and e["name"] == "ring 2"]
    [end] = [e for e in events if e["ph"] == "E" and e["ts"] == 6]
    assert counter["args"][NAME] == 58 and end["args"][f"{NAME}_high_water"] == 58

    # OTLP: the spans a real receiver was sent
    with OtlpReceiver() as rx:
        copy.ringtrace("convert", case, "--otlp-endpoint", rx.grpc_endpoint, "--otlp-protocol", "grpc")
        assert rx.wait_for_spans(4)
        spans = {s.name: s for s in rx.spans()}
    attrs = spans[SITE].attrs
    assert (attrs[f"ringtrace.{NAME}.high_water"], attrs[f"ringtrace.{NAME}.alloc"]) == (58, 58)
    assert attrs[f"ringtrace.{NAME}.high_water_ratio"] == 58 / 64
    [root] = [s for s in spans.values() if not s.parent_id]
    assert root.attrs[f"ringtrace.{NAME}_max"] == tuple(CAPS)

    # the report page's data: the resource's words and unit, its charts with capacity and need
    copy.ringtrace("report", case, "-o", tmp_path / "page.html")
    page = (tmp_path / "page.html").read_text()
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S)
    assert found is not None
    data = json.loads(found[1])
    assert data["resources"][NAME] == {"words": "event pool", "unit": "events", "bytes": False}
    [source] = data["sources"]
    [chart] = [c for c in source["charts"] if (c["ring"], c["resource"]) == (2, NAME)]
    assert (chart["capacity"], chart["need"], max(c[2] for c in chart["occ"])) == (64, 58, 58)

    # the compiled parts: written from the new tables, their build stops; nothing built for three stays behind
    copy.run("-m", "ringtrace.stages.core_header")
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=copy.root,
                           env=copy.env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0
    assert "the C core carries three resources" in build.stderr
    assert "the encoder writes three resources" in build.stderr
    assert "ringtrace: the compiled reading core and the Perfetto encoder were not built" in build.stderr
    assert not list((copy.root / "ringtrace").rglob("*.so"))
    plain = Copy(copy.root, pure=False)
    assert plain.run("-c", "from ringtrace.stages import core; print(core.COMPILED)").strip() == "False"
    assert peaks(plain.ringtrace("summary", "--format", "json", run))[2]["high_water"] == 58
