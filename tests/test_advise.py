"""``ringtrace advise``, proved on the project's simulator.

For each program below the test finds, by bisection on the simulator, the smallest capacity of
every ring and resource with which the program completes (the other resources at the compile
defaults).  Then it follows ``advise`` from (a) a run at the compile defaults, (b) a tight run
that passes and (c) a run that wedges: each step writes the run's file like the runtime, reads
it back through ringtrace's reader, advises on all runs of the program so far, and sizes the next
run from the advice (``recommended`` where given, else ``measure_next``) until every entry has a
recommendation.  It asserts that the final sizes complete, that each final size is at least the
bisection minimum and at most that minimum plus headroom, rounded to an accepted value, that
every ``lower_bound`` is at most and every ``upper_bound`` at least the minimum, and that the
loop ends within a handful of runs.

``.venv/bin/python -m tests.test_advise`` prints the README's table.
"""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ringtrace import sim
from ringtrace.advise import COMPILE_DEFAULT, RunFacts, accept, advise, advise_runs, next_above, snippet
from ringtrace.cli import main
from ringtrace.diagnose import Thresholds
from ringtrace.readfiles import read_files
from ringtrace.records import RESOURCES, RunAdvice, RunFinished
from ringtrace.sinks import FanOut
from ringtrace.sinks.summary import SummarySink

HEADROOM = 0.1
MAX_RUNS = 9
FIELD = {"task_window": "task_window_max", "heap": "heap_max", "dep_pool": "dep_pool_max"}
Key = tuple[str, int, str]  # rank ("" for L2), ring, resource

# -- the programs ---------------------------------------------------------------------------------

_KIB = 1024
PROGRAMS: dict[str, list[sim.Scenario]] = {
    # each layer's depth-2 scopes hold a few 1-4 KiB blocks: heap is what fills first on small rings
    "heap_bound": [sim.Scenario(name="heap_bound", program="heap_bound", seed=1, loops=(4, 3), tasks=(0, 2, 3),
                                tensor_bytes=(1 * _KIB, 4 * _KIB), deps=(0, 2))],
    # many tiny tasks per scope: the task window is the limit
    "window_bound": [sim.Scenario(name="window_bound", program="window_bound", seed=2, loops=(3, 2),
                                  tasks=(0, 13, 6), tensor_bytes=(1 * _KIB, 1 * _KIB), deps=(0, 1))],
    # wide fanin: the dep pool is the limit
    "dep_pool_bound": [sim.Scenario(name="dep_pool_bound", program="dep_pool_bound", seed=3, loops=(4, 2),
                                    tasks=(0, 4, 3), tensor_bytes=(1 * _KIB, 2 * _KIB), deps=(5, 9))],
    # 6 nesting levels: depths 3-5 fold into ring 3; the depth-3 scopes allocate nothing themselves
    "ring3_pileup": [sim.Scenario(name="ring3_pileup", program="ring3_pileup", seed=4, loops=(2, 1, 2, 3, 2),
                                  tasks=(0, 0, 1, 0, 2, 2), tensor_bytes=(1 * _KIB, 3 * _KIB), deps=(0, 2))],
    # a loop-carried value: each depth-1 scope's first block is read by the next one
    "cross_scope_value": [sim.Scenario(name="cross_scope_value", program="cross_scope_value", seed=5,
                                       loops=(5, 2), tasks=(0, 4, 2), tensor_bytes=(1 * _KIB, 3 * _KIB),
                                       deps=(0, 2), carry=1)],
    # an L3 run: two ranks of one program whose shapes differ (rank 1's blocks grow layer by layer)
    "l3_two_ranks": [
        sim.Scenario(name="l3_two_ranks", program="moe_layer", seed=6, loops=(4, 2, 2), tasks=(0, 1, 2, 2),
                     tensor_bytes=(1 * _KIB, 2 * _KIB), deps=(0, 3)),
        sim.Scenario(name="l3_two_ranks", program="moe_layer", seed=7, loops=(4, 2, 2), tasks=(0, 1, 2, 3),
                     tensor_bytes=(1 * _KIB, 2 * _KIB), deps=(0, 3), growth=0.5),
    ],
}


def _rank(ranks: list[sim.Scenario], n: int) -> str:
    return str(n) if len(ranks) > 1 else ""


def with_caps(scn: sim.Scenario, caps: dict[tuple[int, str], int]) -> sim.Scenario:
    """``scn`` with the given (ring, resource) capacities; the others at the compile defaults."""
    values = {FIELD[r]: [COMPILE_DEFAULT[r]] * 4 for r in RESOURCES}
    for (ring, r), c in caps.items():
        values[FIELD[r]][ring] = c
    return msgspec.structs.replace(scn, **{k: tuple(v) for k, v in values.items()})


def completes(scn: sim.Scenario, caps: dict[tuple[int, str], int]) -> bool:
    return not sim.outcome(with_caps(scn, caps)).wedged


def _accepted_values(resource: str) -> list[int]:
    if resource == "task_window":
        return [1 << k for k in range(2, 15)]
    if resource == "heap":
        return [k * _KIB for k in range(1, (COMPILE_DEFAULT["heap"] // _KIB) + 1)]
    return list(range(4, COMPILE_DEFAULT["dep_pool"] + 1))


@functools.cache
def bisection_minimum(program: str) -> dict[Key, int]:
    """Per rank, ring and resource: the smallest accepted capacity that completes (others at defaults)."""
    out: dict[Key, int] = {}
    for n, scn in enumerate(PROGRAMS[program]):
        for ring in range(4):
            for r in RESOURCES:
                values = _accepted_values(r)
                lo, hi = -1, len(values) - 1  # values[hi] completes (the default); values[lo] fails (or none)
                assert completes(scn, {(ring, r): values[hi]})
                while hi - lo > 1:
                    mid = (lo + hi) // 2
                    if completes(scn, {(ring, r): values[mid]}):
                        hi = mid
                    else:
                        lo = mid
                out[(_rank(PROGRAMS[program], n), ring, r)] = values[hi]
    return out


# -- one advise loop ------------------------------------------------------------------------------


class Loop(msgspec.Struct):
    program: str
    start: str
    runs: int = 0
    final: dict[str, int] = {}  # "rank/ring/resource" -> recommended
    history: list[dict[str, Any]] = []


def _write(root: Path, program: str, step: int, caps: dict[Key, int]) -> list[Path]:
    """One run of ``program`` at ``caps`` in the runtime's layout (L2, or L3 with a folder per rank)."""
    ranks = PROGRAMS[program]
    paths = []
    for n, scn in enumerate(ranks):
        rank = _rank(ranks, n)
        mine = {(ring, r): c for (rk, ring, r), c in caps.items() if rk == rank}
        run = root / "build_output" / f"{program}_20261201_{step:06d}" / "dfx_outputs"
        path = (run / f"rank{rank}" / "d0" if rank else run) / "scope_stats" / "scope_stats.jsonl"
        path.parent.mkdir(parents=True)
        sim.write_file(path, with_caps(scn, mine))
        paths.append(path)
    return paths


def _read(paths: list[Path]) -> list[RunFinished]:
    sink = SummarySink()
    assert read_files(paths, FanOut([sink]), Thresholds()) == []
    return sink.finished


def _targets(program: str, advice: list[tuple[str, RunAdvice]]) -> tuple[dict[Key, int], bool]:
    """The next run's capacities and whether they are final.

    An L3 entry passes one RunConfig to every rank: per ring and resource the largest size any rank
    asks for; it is final when that rank's entry is a recommendation (a smaller rank's measurement
    cannot be run under the shared size, and needs none: the shared size completed for it).
    """
    out: dict[Key, int] = {}
    settled: dict[Key, bool] = {}
    for rank, ra in advice:
        for a in ra.advice:
            target = a.recommended if a.recommended is not None else a.measure_next
            assert target is not None, a
            out[(rank, a.ring, a.resource)] = target
            settled[(rank, a.ring, a.resource)] = a.recommended is not None
    if len(PROGRAMS[program]) == 1:
        return out, all(settled.values())
    final = True
    for ring in range(4):
        for r in RESOURCES:
            mine = {rk: v for (rk, g, q), v in out.items() if (g, q) == (ring, r)}
            if not mine:
                continue
            top = max(mine.values())
            final = final and any(settled[(rk, ring, r)] for rk, v in mine.items() if v == top)
            for rk in mine:
                out[(rk, ring, r)] = top
    return out, final


def _bounds_hold(program: str, advice: list[tuple[str, RunAdvice]]) -> None:
    minimum = bisection_minimum(program)
    for rank, ra in advice:
        for a in ra.advice:
            m = minimum[(rank, a.ring, a.resource)]
            assert a.lower_bound is None or a.lower_bound <= m, (a, m)
            assert a.upper_bound is None or a.upper_bound >= m, (a, m)


def start_caps(program: str, start: str) -> dict[Key, int]:
    """(a) generous: the compile defaults; (b) tight and passing; (c) one that wedges."""
    minimum = bisection_minimum(program)
    if start == "generous":
        return {k: COMPILE_DEFAULT[k[2]] for k in minimum}
    tight = {k: accept(k[2], 1.3 * v) for k, v in minimum.items()}
    if len(PROGRAMS[program]) > 1:  # one RunConfig for all ranks
        tight = {k: max(v for q, v in tight.items() if q[1:] == k[1:]) for k in tight}
    if start == "tight":
        return tight
    # wedged: the resource with the largest need, sized under its minimum
    key = max(minimum, key=lambda k: minimum[k] / COMPILE_DEFAULT[k[2]] if k[2] != "heap" else minimum[k] / 8192)
    low = {**tight}
    for k in low:
        if k[1:] == key[1:]:
            low[k] = max(4 if k[2] != "heap" else _KIB, minimum[key] // 2)
    return low


def follow(program: str, start: str, tmp: Path) -> Loop:
    loop = Loop(program, start)
    caps = start_caps(program, start)
    files: list[RunFinished] = []
    for step in range(MAX_RUNS):
        paths = _write(tmp, program, step, caps)
        files += _read(paths)
        facts = [RunFacts(f.source.path, f.source.labels, f.summary) for f in files]
        everything = advise_runs(facts, HEADROOM)
        latest = [(f.source.labels.rank, ra) for f, ra in zip(files, everything, strict=True) if
                  f.source.path in {str(p) for p in paths}]
        _bounds_hold(program, latest)
        loop.runs += 1
        outcome = [sim.outcome(with_caps(s, {(g, r): c for (rk, g, r), c in caps.items()
                                             if rk == _rank(PROGRAMS[program], n)})).wedged
                   for n, s in enumerate(PROGRAMS[program])]
        loop.history.append({"caps": {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in caps.items() if
                                      v != COMPILE_DEFAULT[k[2]]}, "wedged": outcome})
        caps, final = _targets(program, latest)
        if final:
            loop.final = {f"{k[0]}/{k[1]}/{k[2]}": v for k, v in caps.items()}
            return loop
    raise AssertionError(f"{program} from {start}: no final recommendation after {MAX_RUNS} runs: {loop.history}")


STARTS = ("generous", "tight", "wedged")


@functools.cache
def loop_result(program: str, start: str) -> Loop:
    with tempfile.TemporaryDirectory() as tmp:
        return follow(program, start, Path(tmp))


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("program", list(PROGRAMS))
def test_advise_converges_to_sizes_that_complete(program: str, start: str) -> None:
    minimum = bisection_minimum(program)
    if start == "wedged":
        caps = start_caps(program, start)
        assert any(sim.outcome(with_caps(s, {(g, r): c for (rk, g, r), c in caps.items()
                                              if rk == _rank(PROGRAMS[program], n)})).wedged
                   for n, s in enumerate(PROGRAMS[program])), "the wedged start must wedge"
    if start == "tight":
        assert not any(w for h in [loop_result(program, start).history[0]] for w in h["wedged"])
    loop = loop_result(program, start)
    final = {tuple(k.split("/")): v for k, v in loop.final.items()}
    caps = {(k[0], int(k[1]), k[2]): v for k, v in final.items()}
    for n, scn in enumerate(PROGRAMS[program]):
        mine = {(g, r): c for (rk, g, r), c in caps.items() if rk == _rank(PROGRAMS[program], n)}
        assert sim.accepted(with_caps(scn, mine)) == []
        assert completes(scn, mine), (program, start, mine)
    for key, value in caps.items():
        m = max(v for k, v in minimum.items() if k[1:] == key[1:])  # one RunConfig for all ranks
        assert m <= value <= accept(key[2], m * (1 + HEADROOM)), (key, value, m)
    assert loop.runs <= MAX_RUNS, loop.history


def test_the_binding_resources_really_bind() -> None:
    """Each program is limited where its name says (its minimum is far from the accepted floor)."""
    m = {p: bisection_minimum(p) for p in PROGRAMS}
    assert m["window_bound"][("", 1, "task_window")] >= 16
    assert m["heap_bound"][("", 2, "heap")] >= 8 * _KIB
    assert m["dep_pool_bound"][("", 2, "dep_pool")] >= 16
    # ring 3 carries the nesting, and its need is a nested scope's, not the depth-3 scopes' allocation
    assert m["ring3_pileup"][("", 3, "heap")] > 4 * max(m["ring3_pileup"][("", r, "heap")] for r in range(3))
    plain = msgspec.structs.replace(PROGRAMS["cross_scope_value"][0], carry=0)
    assert completes(plain, {(1, "heap"): m["cross_scope_value"][("", 1, "heap")] - _KIB})  # the carry costs
    assert m["l3_two_ranks"][("1", 3, "heap")] > m["l3_two_ranks"][("0", 3, "heap")]


# -- the command, its JSON and the statements on bad input ---------------------------------------


def _tree(tmp: Path, scn: sim.Scenario, name: str = "prog_20261201_000000") -> Path:
    path = tmp / "build_output" / name / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    sim.write_file(path, scn)
    return path


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["advise", "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_advise_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tree(tmp_path, PROGRAMS["heap_bound"][0])
    code, obj = _json(capsys, str(path))
    assert code == 0
    [f] = obj["files"]
    assert set(f) == {"path", "labels", "advice", "run_config", "kernel_fixes"}
    keys = {"ring", "resource", "capacity", "lower_bound", "upper_bound", "estimate", "recommended", "basis",
            "reason", "measure_next"}
    assert f["advice"] and all(set(a) == keys for a in f["advice"])
    assert {(a["ring"], a["resource"]) for a in f["advice"]} == {(r, res) for r in range(3) for res in RESOURCES}
    assert all(a["basis"] == "oversized" and a["recommended"] is None and a["measure_next"] for a in f["advice"])
    assert all(a["upper_bound"] == a["capacity"] for a in f["advice"])  # it completed
    assert set(f["run_config"]) == {"ring_task_window", "ring_heap", "ring_dep_pool"}
    assert f["run_config"]["ring_heap"][3] == 0  # ring 3 unused: left at the compile default
    # the same advice list in summary --format json
    assert main(["summary", "--format", "json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["advice"] == f["advice"]


def test_advise_table_and_headroom(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scn = PROGRAMS["window_bound"][0]
    m = bisection_minimum("window_bound")
    path = _tree(tmp_path, with_caps(scn, {(ring, r): m[("", ring, r)] for ring in range(4) for r in RESOURCES}))
    assert main(["advise", str(path)]) == 0
    out = capsys.readouterr().out
    assert "RunConfig" in out and "ring 1 task_window" in out and "basis" in out
    _, zero = _json(capsys, "--headroom", "0", str(path))
    _, big = _json(capsys, "--headroom", "1", str(path))
    heap = {a["ring"]: a for a in zero["files"][0]["advice"] if a["resource"] == "heap"}
    heap_big = {a["ring"]: a for a in big["files"][0]["advice"] if a["resource"] == "heap"}
    assert all((heap[r]["recommended"] or heap[r]["measure_next"]) <
               (heap_big[r]["recommended"] or heap_big[r]["measure_next"]) for r in heap if heap[r]["estimate"] > 2)
    assert main(["advise", "--headroom", "-1", str(path)]) == 2


def test_statements_on_bad_input(tmp_path: Path) -> None:
    def advice_of(scn: sim.Scenario, name: str) -> RunAdvice:
        [fin] = _read([_tree(tmp_path, scn, name)])
        return advise(fin.summary, HEADROOM, fin.source.path, fin.source.labels)

    base = PROGRAMS["heap_bound"][0]
    dropped = advice_of(msgspec.structs.replace(base, drop_rate=0.2, seed=9), "dropped_20261201_000000")
    assert {a.basis for a in dropped.advice} == {"dropped"}
    assert all(a.lower_bound is None and a.recommended is None and "dropped" in a.reason for a in dropped.advice)
    v4 = advice_of(msgspec.structs.replace(base, version=4), "v4_20261201_000000")
    assert {a.resource for a in v4.advice} == {"task_window", "heap"}  # no dep pool to advise on
    wedge = advice_of(with_caps(base, {(2, "heap"): 2 * _KIB}), "wedged_20261201_000000")
    assert {a.basis for a in wedge.advice} == {"wedged"} and not wedge.final
    ring2 = next(a for a in wedge.advice if (a.ring, a.resource) == (2, "heap"))
    assert ring2.upper_bound is None and ring2.recommended is None and (ring2.measure_next or 0) > 2 * _KIB
    assert "wedged" in ring2.reason
    # no capacities: nothing proven, no measurement suggested, no made-up recommendation
    path = _tree(tmp_path, base, "nocap_20261201_000000")
    lines = path.read_bytes().split(b"\n", 1)
    meta = json.loads(lines[0])
    meta.update(task_window_max=[0] * 4, heap_max=[0] * 4, dep_pool_max=[0] * 4)
    path.write_bytes(json.dumps(meta).encode() + b"\n" + lines[1])
    [fin] = _read([path])
    nocap = advise(fin.summary)
    assert nocap.advice and all(a.capacity is None and a.recommended is None and a.measure_next is None
                                and "no capacity" in a.reason for a in nocap.advice)
    assert nocap.run_config == ()


def test_runs_of_one_program_pool_their_evidence(tmp_path: Path) -> None:
    scn = PROGRAMS["heap_bound"][0]
    m = bisection_minimum("heap_bound")[("", 2, "heap")]
    ok = _read([_tree(tmp_path, with_caps(scn, {(2, "heap"): m}), "heap_bound_20261201_000001")])
    bad = _read([_tree(tmp_path, with_caps(scn, {(2, "heap"): m - _KIB}), "heap_bound_20261201_000002")])
    facts = [RunFacts(f.source.path, f.source.labels, f.summary) for f in ok + bad]
    pooled = advise_runs(facts, HEADROOM)
    for ra in pooled:
        a = next(a for a in ra.advice if (a.ring, a.resource) == (2, "heap"))
        assert a.upper_bound == m  # the completed run bounds the need for both
    # the wedge is pinned on the heap: the ring's window and dep pool were at capacities that completed
    a = next(a for a in pooled[1].advice if (a.ring, a.resource) == (2, "heap"))
    assert a.lower_bound == m and "completed" in a.reason
    alone = advise(bad[0].summary)
    assert next(a for a in alone.advice if (a.ring, a.resource) == (2, "heap")).lower_bound != m


def test_rounding_and_snippets() -> None:
    assert [accept("task_window", n) for n in (0, 3, 4, 5, 8, 9)] == [4, 4, 4, 8, 8, 16]
    assert [accept("heap", n) for n in (0, 1, 1024, 1025)] == [1024, 1024, 1024, 2048]
    assert [accept("dep_pool", n) for n in (0, 4, 4.2, 9)] == [4, 4, 5, 9]
    assert (next_above("task_window", 8), next_above("heap", 2048), next_above("dep_pool", 7)) == (16, 3072, 8)
    assert snippet("ring_heap", (0, 0, 2 * 1024**3, 0)) == "ring_heap=(0, 0, 2 * 1024**3, 0)"
    assert snippet("ring_heap", 3 * 1024) == "ring_heap=3 * 1024"
    assert snippet("ring_task_window", (4, 8, 0, 16)) == "ring_task_window=(4, 8, 0, 16)"


def test_overview_first_for_several_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = PROGRAMS["heap_bound"][0]
    _tree(tmp_path, base, "a_20261201_000000")
    _tree(tmp_path, with_caps(base, {(2, "heap"): 2 * _KIB}), "b_20261201_000000")
    for command in ("summary", "check", "advise"):
        main([command, str(tmp_path)])
        out = capsys.readouterr().out
        head = out.split("\n\n", 1)[0]
        assert "2 sources" in head and head.index("b_20261201") < head.index("a_20261201"), command  # problems first
        body = out.split("\n\n", 1)[1]
        assert "b_20261201" in body, command
        if command == "check":  # one line per source after the overview, as before
            assert "ok " in body and "FAIL " in body
            continue
        if command == "summary":  # details only where there are errors or warnings, unless --details
            assert "a_20261201" not in body
        main([command, "--details", str(tmp_path)])
        assert "a_20261201" in capsys.readouterr().out.split("\n\n", 1)[1]


def table() -> str:
    """The README table: program, bisection minimum, final advice, ratio, runs per start."""
    rows = ["| program | binding (rank/ring/resource) | bisection minimum | final advice | ratio | runs: generous / "
            "tight / wedged |", "|---|---|---|---|---|---|"]
    for program in PROGRAMS:
        m = bisection_minimum(program)
        key = max(m, key=lambda k: m[k] / (8192 if k[2] == "heap" else 8))
        loops = [loop_result(program, s) for s in STARTS]
        final = loops[0].final[f"{key[0]}/{key[1]}/{key[2]}"]
        finals = {lp.final[f"{key[0]}/{key[1]}/{key[2]}"] for lp in loops}
        unit = (lambda v: f"{v // 1024} KiB") if key[2] == "heap" else str
        shown = " / ".join(unit(v) for v in sorted(finals)) if len(finals) > 1 else unit(final)
        ratio = " / ".join(f"{v / m[key]:.2f}" for v in sorted(finals))
        rows.append(f"| {program} | {key[0] or '-'}/{key[1]}/{key[2]} | {unit(m[key])} | {shown} | {ratio} | "
                    f"{' / '.join(str(lp.runs) for lp in loops)} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())


def test_a_host_logs_deadlock_report_proves_the_short_resource(capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    case = Path(__file__).parent / "golden" / "hostlog_real_heap" / "input"
    monkeypatch.chdir(case)
    requested = int(next(line for line in (case / "host.log").read_text().splitlines()
                         if "Requested:" in line).split("Requested:")[1].split()[0])
    _, alone = _json(capsys, ".")
    _, logged = _json(capsys, "--host-log", "host.log", ".")
    heap = next(a for a in logged["files"][0]["advice"] if a["resource"] == "heap")
    assert next(a for a in alone["files"][0]["advice"] if a["resource"] == "heap")["lower_bound"] is None
    assert heap["lower_bound"] == accept("heap", requested + 1) > heap["capacity"]
    assert "host log" in heap["reason"] and heap["measure_next"] >= heap["lower_bound"]
    # the log names the heap: the ring's other resources are not suspects
    assert all(a["measure_next"] == a["capacity"] for a in logged["files"][0]["advice"] if a["resource"] != "heap")
