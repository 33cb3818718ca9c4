"""The simulator, read back through ringtrace's own reader (``read_files`` + sinks).

Checks that the simulated files look like the runtime's (key order, formatting, sites), that
the reader finds exactly what the model did (records, completeness, wedges and where they
happened, drops), that the model keeps the guide's ring rules at every record (FIFO lazy
reclaim, bounded occupancy), and that v4/v5 files with wrapped heap counters unroll to the
same counters and peaks as the v6 file of the same run — a cross-check of the decoder.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.config import Thresholds
from ringtrace.demo import sim
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import Record, RunFinished
from ringtrace.sinks import FanOut
from ringtrace.sinks.summary import SummarySink
from ringtrace.sources.paths import find_sources, source_labels
from tests._support.sinks import Collect

SAMPLE = (Path(__file__).parents[1] / "fixtures" / "samples" / "outputs" /
          "TestPagedAttention_big16x2048_tight_20261130_101530" / "scope_stats" / "scope_stats.jsonl")
VERSIONS: tuple[sim.Version, ...] = (4, 5, 6)


class Read(msgspec.Struct):
    obj: dict[str, Any]  # the summary --format json file object
    records: list[Record]
    finished: RunFinished


def read(path: Path) -> Read:
    summary, collect = SummarySink(), Collect()
    assert read_files([path], FanOut([summary, collect]), Thresholds()) == []
    [obj] = summary.to_json()["files"]
    return Read(obj, collect.records, next(iter(collect.finished.values())))


def write(tmp: Path, scn: sim.Scenario, name: str = "") -> Path:
    path = tmp / (name or f"{scn.name}_v{scn.version}_{scn.seed}") / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    size = sim.write_file(path, scn)
    assert path.stat().st_size == size
    return path


def check_fifo(records: list[Record], scn: sim.Scenario) -> int:
    """The ring rules at every record; returns how many times a tail moved (reclaims seen)."""
    moves = 0
    prev: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    n = 3 if scn.version >= 5 else 2
    for r in records:
        assert r.ring == min(r.depth, 3)
        tail = (r.task_window_start, r.heap_start, r.dep_pool_start or 0)[:n]
        head = (r.task_window_end, r.heap_end, r.dep_pool_end or 0)[:n]
        cap = (scn.task_window_max[r.ring], scn.heap_max[r.ring], scn.dep_pool_max[r.ring])
        usable = (cap[0] - 1, cap[1], cap[2])  # a window of N holds N - 1 tasks; a heap block may fill the ring
        for i in range(n):
            assert 0 <= tail[i] <= head[i], r
            assert head[i] - tail[i] <= usable[i] <= cap[i], r
        last = prev.get(r.ring)
        if last is not None:
            ltail, lhead = last
            assert all(a >= b for a, b in zip(tail, ltail, strict=True)), r
            assert all(a >= b for a, b in zip(head, lhead, strict=True)), r
            if tail != ltail:
                moves += 1
                # one FIFO watermark: a heap block is freed only when its task retires; the dep pool is reclaimed in
                # batches (after 64 retired tasks, runtime.DEP_POOL_BATCH), so its tail may catch up at a sample
                # where the window's did not move
                assert tail[1] == ltail[1] or tail[0] > ltail[0], f"the heap's tail moves with the window's ({r})"
                # a block went to the ring's start (no straddle), or filled a wrapped ring exactly (never allowed)
                wrapped = head[1] // cap[1] != lhead[1] // cap[1] or head[1] - ltail[1] >= cap[1]
                assert wrapped or any(head[i] - ltail[i] > usable[i] for i in range(n)), \
                    f"a tail moved although every allocation fitted without reclaim ({r})"
        prev[r.ring] = (tail, head)
    return moves


# -- format --------------------------------------------------------------------------------


def _keys(line: bytes) -> list[str]:
    return list(json.loads(line))


def test_lines_look_like_the_runtimes() -> None:
    real = SAMPLE.read_bytes().splitlines(keepends=True)
    for version in VERSIONS:
        lines = list(sim.simulate(sim.named("tight", version=version)))
        assert all(line.endswith(b"\n") and line.count(b"\n") == 1 for line in lines)
        # json.dumps default separators, as the runtime writes them
        assert all(json.dumps(json.loads(line)).encode() + b"\n" == line for line in lines)
        meta_keys, rec_keys = _keys(real[0]), _keys(real[1])
        if version == 4:
            meta_keys.remove("dep_pool_max")
            rec_keys = [k for k in rec_keys if not k.startswith("dep_pool")]
        assert _keys(lines[0]) == meta_keys
        assert all(_keys(line) == rec_keys for line in lines[1:])
        first = json.loads(lines[1])
        assert first["site"] == "(unknown):0" and first["depth"] == 0 and first["phase"] == "begin"
        if version >= 5:
            assert first["dep_pool_start"] == first["dep_pool_end"] == 1
        sites = {json.loads(line)["site"] for line in lines[1:]}
        assert all(s == "(unknown):0" or re.fullmatch(r"paged_attention_orch\.cpp:\d+", s) for s in sites)


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a = b"".join(sim.simulate(sim.named("healthy", seed=1)))
    assert a == b"".join(sim.simulate(sim.named("healthy", seed=1)))
    assert a == b"".join(sim.blocks(sim.named("healthy", seed=1), 5))
    assert a != b"".join(sim.simulate(sim.named("healthy", seed=2)))


def test_site_basename_is_cut_to_31_bytes() -> None:
    scn = sim.Scenario(program="a_very_long_program_name_that_goes_on", loops=(1,), tasks=(0, 1))
    site = json.loads(list(sim.simulate(scn))[2])["site"]
    assert site.split(":")[0] == "a_very_long_program_name_that_goes_on_orch.cpp"[:31]


def test_bad_scenarios_are_refused() -> None:
    with pytest.raises(ValueError, match="tasks needs 3"):
        sim.Scenario(loops=(1, 2), tasks=(1,))
    with pytest.raises(ValueError, match="unknown scenario"):
        sim.named("nope")


# -- read back -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sim.NAMES)
def test_named_scenarios_read_back_consistently(tmp_path: Path, name: str, version: sim.Version) -> None:
    scn = sim.named(name, version=version)
    out = sim.outcome(scn)
    got = read(write(tmp_path, scn))
    obj = got.obj
    assert obj["parse_errors"] == 0 and obj["problems"] == []
    assert (obj["version"], obj["fatal"], obj["dropped"], obj["total"]) == (version, scn.fatal, 0, out.total)
    assert obj["records"] == out.total and obj["complete"] is True
    assert obj["unmatched_begins"] == obj["unmatched_ends"] == 0
    if version == 6:
        check_fifo(got.records, scn)
    else:  # the wrapped counters: the v6 figures, but for a heap exactly full (see _wrap_equal)
        _wrap_equal(read(write(tmp_path / "v6", msgspec.structs.replace(scn, version=6))), got, version, scn.heap_max)
    if not out.wedged:
        assert obj["wedged"] == [] and obj["scopes"] * 2 == out.total
        return
    wedged = obj["wedged"]
    assert [w["depth"] for w in wedged] == list(range(len(wedged)))  # one open scope per depth, root first
    inner = wedged[-1]
    assert (inner["ring"], inner["depth"]) == (out.ring, out.depth)
    last = got.records[-1]  # only begin records at the tail: the innermost open scope's begin is last
    assert (last.phase, last.line, last.site) == ("begin", inner["line"], inner["site"])
    assert obj["scopes"] * 2 + len(wedged) == out.total
    finding = next(f for f in obj["findings"] if f["rule"] == "wedged")
    assert f"orch_error_code={out.orch_error_code} " in finding["message"]


def test_tight_rings_reclaim_and_default_rings_do_not(tmp_path: Path) -> None:
    tight = sim.named("tight")
    assert check_fifo(read(write(tmp_path, tight)).records, tight) > 20
    healthy = sim.named("healthy")
    assert check_fifo(read(write(tmp_path, healthy)).records, healthy) == 0  # reclaim only when it must


def test_wedge_is_a_heap_deadlock_on_ring_3_and_fatal_says_so(tmp_path: Path) -> None:
    wedge, fatal = sim.outcome(sim.named("wedge")), sim.outcome(sim.named("fatal"))
    assert (wedge.wedged, wedge.ring, wedge.resource, wedge.orch_error_code) == (True, 3, "heap", 2)
    assert fatal == wedge
    assert read(write(tmp_path, sim.named("wedge"))).obj["fatal"] is False  # deadlocks leave fatal false
    assert read(write(tmp_path, sim.named("fatal"))).obj["fatal"] is True


def test_tensormap_overflow(tmp_path: Path) -> None:
    scn = sim.Scenario(loops=(3, 4), tasks=(0, 1, 2), tensormap_max=12)
    out = sim.outcome(scn)
    assert (out.wedged, out.resource, out.orch_error_code) == (True, "tensormap", 11)
    obj = read(write(tmp_path, scn)).obj
    assert obj["tensormap"]["peak"] == 12 and (obj["wedged"][-1]["ring"], obj["wedged"][-1]["depth"]) == (2, 2)
    assert "orch_error_code=11 " in next(f for f in obj["findings"] if f["rule"] == "wedged")["message"]


def test_collapse_loads_ring_3_only(tmp_path: Path) -> None:
    obj = read(write(tmp_path, sim.named("collapse"))).obj
    heap = {r["ring"]: r for r in obj["rings"] if r["resource"] == "heap"}
    assert heap[3]["need_ratio"] >= 0.8
    assert all(heap[r]["high_water"] == 0 for r in (0, 1, 2))
    assert "auto_scope_collapse" in {f["rule"] for f in obj["findings"]}


@pytest.mark.parametrize("name", ["healthy", "tight"])
def test_dropped_records(tmp_path: Path, name: str) -> None:
    scn = msgspec.structs.replace(sim.named(name, seed=3), drop_rate=0.05)
    out = sim.outcome(scn)
    assert out.dropped > 0
    got = read(write(tmp_path, scn))
    obj = got.obj
    assert (obj["dropped"], obj["total"]) == (out.dropped, out.total)
    assert obj["records"] == out.total - out.dropped and obj["complete"] is True
    assert obj["unmatched_begins"] + obj["unmatched_ends"] > 0
    assert "dropped" in {f["rule"] for f in obj["findings"]}
    check_fifo(got.records, scn)  # what is left still keeps the ring rules


def _wrap_equal(v6: Read, other: Read, version: int, caps: tuple[int, ...]) -> None:
    """v4/v5 records unroll to exactly the v6 counters, but for one ambiguity of the wrapped format: a
    heap exactly full (a block as large as the free room fits) has the offsets of an empty one, and
    reads as empty.  Peaks agree where no record was exactly full."""
    assert len(other.records) == len(v6.records)
    full = 0
    for a, b in zip(v6.records, other.records, strict=True):
        if version == 4:
            a = msgspec.structs.replace(a, dep_pool_start=None, dep_pool_end=None)
        if a.heap_end - a.heap_start == caps[a.ring] and a != b:
            assert b == msgspec.structs.replace(a, heap_start=a.heap_end), (a, b)  # read as empty
            full += 1
            continue
        assert a == b
    resources = ("task_window", "heap", "dep_pool") if version == 5 else ("task_window", "heap")
    if not full:
        assert [r for r in v6.obj["rings"] if r["resource"] in resources] == other.obj["rings"]
    assert v6.obj["wedged"] == other.obj["wedged"] and v6.obj["tensormap"] == other.obj["tensormap"]


@pytest.mark.parametrize("name", ["tight", "collapse", "wedge"])
def test_wrapped_heaps_unroll_to_the_v6_counters(tmp_path: Path, name: str) -> None:
    v6 = read(write(tmp_path, sim.named(name, version=6)))
    heaps = [r for r in v6.records if r.heap_end >= sim.named(name).heap_max[r.ring]]
    assert heaps, "the scenario must wrap its heap for the test to mean anything"
    for version in (4, 5):
        raw = [json.loads(line) for line in list(sim.simulate(sim.named(name, version=version)))[1:]]
        assert all(r["heap_end"] < sim.named(name).heap_max[r["ring"]] for r in raw)  # really wrapped
        _wrap_equal(v6, read(write(tmp_path, sim.named(name, version=version))), version, sim.named(name).heap_max)


@st.composite
def scenarios(draw: st.DrawFn) -> sim.Scenario:
    depth = draw(st.integers(1, 5))
    loops = tuple(draw(st.lists(st.integers(1, 5), min_size=depth, max_size=depth)))
    tasks = tuple(draw(st.lists(st.integers(0, 4), min_size=depth + 1, max_size=depth + 1)))
    tw = draw(st.tuples(*[st.integers(3, 40)] * 4))
    heap = draw(st.tuples(*[st.integers(6000, 80000)] * 4))  # odd sizes: wrap modulo any capacity
    dep = draw(st.tuples(*[st.integers(8, 80)] * 4))
    lo = draw(st.integers(1, 3))
    dlo = draw(st.integers(0, 1))
    return sim.Scenario(
        name="random", seed=draw(st.integers(0, 2**31)), loops=loops, tasks=tasks, sites=draw(st.integers(1, 3)),
        tensor_bytes=(lo << 10, (lo + draw(st.integers(0, 3))) << 10), growth=draw(st.sampled_from([0.0, 0.25])),
        deps=(dlo, dlo + draw(st.integers(0, 2))), after=draw(st.sampled_from([0.0, 0.5])),
        task_window_max=tw, heap_max=heap, dep_pool_max=dep,
        tensormap_max=draw(st.sampled_from([40, 65536])))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scn=scenarios())
def test_random_runs_read_back_exactly(scn: sim.Scenario) -> None:
    out = sim.outcome(scn)
    with tempfile.TemporaryDirectory() as tmp:
        reads = {v: read(write(Path(tmp), msgspec.structs.replace(scn, version=v))) for v in VERSIONS}
    v6 = reads[6]
    assert v6.obj["parse_errors"] == 0 and v6.obj["problems"] == []
    assert v6.obj["records"] == out.total and v6.obj["complete"]
    assert v6.obj["unmatched_begins"] == v6.obj["unmatched_ends"] == 0
    check_fifo(v6.records, scn)
    if out.wedged:
        inner = v6.obj["wedged"][-1]
        assert (inner["ring"], inner["depth"]) == (out.ring, out.depth)
        after = [r for r in v6.records if r.line > inner["line"]]  # only its closed children follow its begin
        assert all(r.depth > inner["depth"] for r in after)
        assert scn.after > 0 or after == []
    else:
        assert v6.obj["wedged"] == []
    for version in (4, 5):
        assert reads[version].obj["parse_errors"] == 0
        if not _head_lapped(v6.records, scn.heap_max):
            _wrap_equal(v6, reads[version], version, scn.heap_max)


def _head_lapped(records: list[Record], caps: tuple[int, ...]) -> bool:
    """A ring's head moved by a whole capacity or more between two of its samples: offsets modulo the
    capacity cannot show that (v4/v5 files of such a run read one lap short from there on)."""
    last: dict[int, int] = {}
    for r in records:
        if r.heap_end - last.get(r.ring, r.heap_end) >= caps[r.ring]:
            return True
        last[r.ring] = r.heap_end
    return False


# -- writers -----------------------------------------------------------------------------------


def test_write_file_truncates_in_place(tmp_path: Path) -> None:
    path = tmp_path / "scope_stats.jsonl"
    sim.write_file(path, sim.named("healthy"))
    inode = path.stat().st_ino
    size = sim.write_file(path, sim.named("wedge"))
    assert path.stat().st_ino == inode and path.stat().st_size == size
    assert path.read_bytes() == b"".join(sim.simulate(sim.named("wedge")))


def test_live_writer_like_the_runtime(tmp_path: Path) -> None:
    path = tmp_path / "scope_stats" / "scope_stats.jsonl"
    scn = sim.named("tight")
    want = b"".join(sim.simulate(scn))
    steps = []
    for step in sim.live_steps(path, scn, chunks=4):
        assert path.stat().st_size == step.size  # each step is on disk when it is yielded
        steps.append(step)
    assert [s.action for s in steps] == ["create", "write", "write", "write", "write", "close"]
    assert steps[0].size == 0 and steps[-1].size == len(want) and path.read_bytes() == want
    cuts = [s.size for s in steps[1:-1]]
    assert any(want[c - 1:c] != b"\n" for c in cuts[:-1])  # big writes cut lines anywhere


def test_streaming_writer_and_pauses(tmp_path: Path) -> None:
    path = tmp_path / "scope_stats.jsonl"
    scn = sim.named("wedge")
    pauses: list[int] = []
    size = sim.write_live(path, scn, pause=lambda: pauses.append(path.stat().st_size), stream_records=10)
    lines = list(sim.simulate(scn))
    assert path.read_bytes() == b"".join(lines) and size == path.stat().st_size
    assert pauses[0] == 0 and pauses[1] == len(lines[0])  # empty, then the metadata line alone
    assert len(pauses) == 2 + -(-(len(lines) - 1) // 10)
    assert all(b"".join(lines)[p - 1:p] == b"\n" for p in pauses[1:])  # a streaming writer writes whole lines


def test_write_tree_layouts_and_outcomes(tmp_path: Path) -> None:
    steps = list(sim.write_tree(tmp_path, ranks=3, dispatches=2, chunks=2))
    files, errors = find_sources([str(tmp_path)])
    assert errors == [] and len(files) == 1 + 3 * 2
    assert sum(s.action == "close" for s in steps) == len(files)
    # the ranks of one dispatch are written at the same time: their steps interleave
    l3 = [s.path for s in steps if "rank" in str(s.path)]
    assert l3[0] != l3[1]
    for path in files:
        labels = source_labels(path)
        obj = read(path).obj
        assert obj["parse_errors"] == 0 and obj["complete"]
        if labels.rank:
            assert labels.run.startswith("moe_l3_") and labels.program == f"moe_layer_{labels.dispatch}"
            last = (labels.rank, labels.dispatch) == ("2", "1")
            assert obj["fatal"] is last and bool(obj["wedged"]) is last
        else:
            assert labels.run.startswith("paged_attention_") and obj["wedged"] == [] and not obj["fatal"]


def test_generate_bytes_hits_the_target(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    size = sim.generate_bytes(3 << 20, seed=5)(path)
    assert 0.9 * (3 << 20) <= size <= 1.1 * (3 << 20) and size == os.path.getsize(path)
    got = read(path)
    assert got.obj["complete"] and got.obj["wedged"] == [] and got.obj["parse_errors"] == 0
    assert check_fifo(got.records, sim.bench_scenario(3 << 20, seed=5)) > 0  # realistic: rings do reclaim


# -- sizing rules (the "Sizing facts" of scope-stats-format.md) -------------------------------


def _one_ring(**kw: Any) -> sim.Scenario:
    """Layers under the root, each a depth-1 scope of ``tasks`` 1 KiB tasks on ring 1."""
    base: dict[str, Any] = {"name": "rules", "loops": (6,), "tasks": (0, 4), "tensor_bytes": (1024, 1024),
                            "deps": (1, 1)}
    base.update(kw)
    return sim.Scenario(**base)


def _ring1(field: str, value: int, scn: sim.Scenario) -> sim.Scenario:
    caps = list(getattr(scn, field))
    caps[1] = value
    return msgspec.structs.replace(scn, **{field: tuple(caps)})


def test_a_window_of_n_holds_n_minus_1_tasks() -> None:
    scn = _one_ring(tasks=(0, 7))
    assert not sim.outcome(_ring1("task_window_max", 8, scn)).wedged
    out = sim.outcome(_ring1("task_window_max", 7, scn))  # 7 slots hold only 6 of the scope's 7 tasks
    assert (out.wedged, out.ring, out.resource, out.orch_error_code) == (True, 1, "task_window", 1)


def test_the_heap_is_the_runtimes_allocator() -> None:
    """simpler's try_bump_heap: an empty ring takes a block as large as itself; a wrapped ring never fills
    exactly (``tail - top > request``), so three 1 KiB blocks per scope need 4 KiB, not 3 (the bgemm
    program on the runtime: two 256 KiB blocks per scope, 768 KiB minimum)."""
    assert not sim.outcome(_ring1("heap_max", 1024, _one_ring(tasks=(0, 1)))).wedged  # one block: the whole ring
    scn = _one_ring(tasks=(0, 3))
    out = sim.outcome(_ring1("heap_max", 4 * 1024 - 1, scn))
    assert (out.wedged, out.resource, out.orch_error_code) == (True, "heap", 2)
    assert not sim.outcome(_ring1("heap_max", 4 * 1024, scn)).wedged
    # blocks of 1-3 KiB: one that would straddle the end goes to the start, and the bytes skipped at the
    # end stay allocated until it is reclaimed: the smallest heap exceeds the most bytes ever live
    mixed = _one_ring(tasks=(0, 3), tensor_bytes=(1024, 3072), seed=0)
    data = b"".join(sim.simulate(mixed))
    scopes = [json.loads(line) for line in data.splitlines()[1:]]
    held = max(e["heap_end"] - b["heap_end"] for b, e in zip(scopes[1::2], scopes[2::2], strict=False)
               if b["phase"] == "begin" and e["phase"] == "end" and b["depth"] == e["depth"] == 1)
    need = next(size for size in range(held, 4 * held) if not sim.outcome(_ring1("heap_max", size, mixed)).wedged)
    assert need > held, (need, held)
    assert sim.accepted(_ring1("heap_max", 3 * 1024 + 512, scn)) == ["ring 1: heap 3584 is not a multiple of 1.0 KiB"]


def test_the_dep_pool_is_reclaimed_in_batches_of_64_tasks() -> None:
    """simpler's PTO2DepListPool::reclaim: nothing before 64 of the ring's tasks retired, so with 30 tasks in
    all every entry stays; with 200 the need is what was live when the scope owning the 64th task closed."""
    few = _one_ring(tasks=(0, 5), deps=(2, 2))  # 6 scopes x 5 tasks x 2 entries, never reclaimed
    assert not sim.outcome(_ring1("dep_pool_max", 60, few)).wedged
    out = sim.outcome(_ring1("dep_pool_max", 59, few))
    assert (out.wedged, out.ring, out.resource, out.orch_error_code) == (True, 1, "dep_pool", 4)
    many = _one_ring(loops=(40,), tasks=(0, 5), deps=(2, 2))  # the 64th task is in the 13th scope: 65 tasks live
    assert not sim.outcome(_ring1("dep_pool_max", 130, many)).wedged
    assert sim.outcome(_ring1("dep_pool_max", 129, many)).wedged


def test_a_carried_value_keeps_the_previous_scope_live() -> None:
    plain, carry = _one_ring(tasks=(0, 4)), _one_ring(tasks=(0, 4), carry=1)
    # without the carry, each scope's blocks go at its exit: 4 KiB and one block more (a wrapped ring never
    # fills exactly)
    assert sim.outcome(_ring1("heap_max", 5 * 1024 - 1, plain)).wedged
    assert not sim.outcome(_ring1("heap_max", 5 * 1024, plain)).wedged
    # with it, the next scope's first task is submitted while the whole previous scope is still live
    assert sim.outcome(_ring1("heap_max", 6 * 1024 - 1, carry)).resource == "heap"
    assert not sim.outcome(_ring1("heap_max", 6 * 1024, carry)).wedged  # 1 KiB more: the carried value


def test_accepted_capacities() -> None:
    assert sim.accepted(sim.named("tight")) == []
    bad = msgspec.structs.replace(sim.named("tight"), task_window_max=(8, 6, 16, 2), dep_pool_max=(64, 3, 256, 512))
    assert sim.accepted(bad) == ["ring 1: task window 6 is not a power of two >= 4",
                                 "ring 1: dep pool 3 is under 4", "ring 3: task window 2 is not a power of two >= 4"]
