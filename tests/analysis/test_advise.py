"""``ringtrace advise``, proved on the project's simulator.

For each program below the test finds, by bisection on the simulator, the smallest capacity of
every ring and resource with which the program completes (the other resources at the compile
defaults).  Then it follows ``advise`` as a user does on the real runtime: the first run at the
compile defaults; each run laid out as the runtime's scene tests lay it out, a completed run
leaving its scope_stats file and host log, a failed run only its host log (the runtime's
simulator writes no file for a failed run); after each run ``ringtrace advise --format json`` over
every run so far, and the next run takes the program answer's ``run_config`` until it is final.
It asserts that every bound brackets the minimum, that the final sizes complete, that each is
within [minimum, 1.25 x minimum] before rounding to an accepted value, and that the loop ends
within six runs.

``.venv/bin/python -m tests.analysis.test_advise`` prints the README's table.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ringtrace.analysis.advise import (
    RunFacts,
    accept,
    advise,
    advise_programs,
    advise_runs,
    next_above,
    snippet,
)
from ringtrace.cli import main
from ringtrace.config import Thresholds
from ringtrace.demo import sim
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import RESOURCES, RunAdvice, RunFinished
from ringtrace.model.runtime import COMPILE_DEFAULTS, CONFIG_KEYS
from ringtrace.sinks import FanOut
from ringtrace.sinks.summary import SummarySink
from tests._support.scope_stats import WriteJsonl, rec, with_totals

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
    values = {FIELD[r]: [COMPILE_DEFAULTS[r]] * 4 for r in RESOURCES}
    for (ring, r), c in caps.items():
        values[FIELD[r]][ring] = c
    return msgspec.structs.replace(scn, **{k: tuple(v) for k, v in values.items()})


def completes(scn: sim.Scenario, caps: dict[tuple[int, str], int]) -> bool:
    return not sim.outcome(with_caps(scn, caps)).wedged


def _accepted_values(resource: str) -> list[int]:
    if resource == "task_window":
        return [1 << k for k in range(2, 15)]
    if resource == "heap":
        return [k * _KIB for k in range(1, (COMPILE_DEFAULTS["heap"] // _KIB) + 1)]
    return list(range(4, COMPILE_DEFAULTS["dep_pool"] + 1))


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

MAX_RUNS = 6


class Loop(msgspec.Struct):
    program: str
    runs: int = 0
    final: dict[tuple[int, str], int] = {}
    history: list[dict[str, Any]] = []


def caps_of(run_config: dict[str, Any]) -> dict[tuple[int, str], int]:
    """A RunConfig (the guide's scalar or 4-tuple, 0 = compile default) as per-ring capacities."""
    out: dict[tuple[int, str], int] = {}
    for r in RESOURCES:
        value = run_config.get(CONFIG_KEYS[r], 0)
        values = value if isinstance(value, list) else [value] * 4
        for ring, v in enumerate(values):
            out[(ring, r)] = v or COMPILE_DEFAULTS[r]
    return out


def run_once(root: Path, program: str, step: int, caps: dict[tuple[int, str], int]) -> list[bool]:
    """One run of ``program`` at ``caps`` as the runtime leaves it; returns per rank whether it failed.

    L2: ``outputs/<program>_<ts>/`` with ``scope_stats/scope_stats.jsonl`` (completed) and ``host.log``.
    L3: ``build_output/<program>_<ts>/dfx_outputs/rank<N>/d0/scope_stats/...`` and one ``host.log`` for
    the run, its lines tagged ``[rank N]``."""
    ranks = PROGRAMS[program]
    ts = f"20261201_{step:06d}"
    failed = []
    if len(ranks) == 1:
        run = root / "outputs" / f"{program}_{ts}"
        out = sim.write_run(run / "scope_stats" / "scope_stats.jsonl", with_caps(ranks[0], caps), run / "host.log",
                            mode="abort" if step % 2 else "clean")
        return [out.wedged]
    run = root / "build_output" / f"{program}_{ts}"
    text = []
    for n, scn in enumerate(ranks):
        d = run / "dfx_outputs" / f"rank{n}" / "d0"
        out = sim.write_run(d / "scope_stats" / "scope_stats.jsonl", with_caps(scn, caps), d / "rank.log",
                            mode="abort" if step % 2 else "clean")
        log = d / "rank.log"
        text += [f"[rank {n}] {line}" for line in log.read_text().splitlines()]
        log.unlink()
        failed.append(out.wedged)
    (run / "host.log").write_text("\n".join(text) + "\n")
    return failed


def advise_json(root: Path) -> dict[str, Any]:
    """``ringtrace advise --format json`` over every run under ``root`` (the command users run)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["advise", "--format", "json", "--host-log", str(root / "**" / "host.log"), str(root)])
    obj: dict[str, Any] = json.loads(buf.getvalue())
    assert code == 0, obj
    return obj


def follow(program: str, tmp: Path) -> Loop:
    loop = Loop(program)
    minimum = bisection_minimum(program)
    need = {k[1:]: max(v for q, v in minimum.items() if q[1:] == k[1:]) for k in minimum}  # one RunConfig
    caps = {k: COMPILE_DEFAULTS[k[1]] for k in need}
    for step in range(MAX_RUNS + 1):
        failed = run_once(tmp, program, step, caps)
        loop.runs += 1
        loop.history.append({"caps": {f"{k[0]}/{k[1]}": v for k, v in caps.items() if v != COMPILE_DEFAULTS[k[1]]},
                             "failed": failed})
        [answer] = advise_json(tmp)["programs"]
        for a in answer["advice"]:
            m = need[(a["ring"], a["resource"])]
            assert a["lower_bound"] is None or a["lower_bound"] <= m, (a, m, loop.history)
            assert a["upper_bound"] is None or a["upper_bound"] >= m, (a, m, loop.history)
        caps = caps_of(answer["run_config"])
        if answer["final"]:  # every resource in use has its recommendation; the rest stay at the defaults
            advised = {(a["ring"], a["resource"]) for a in answer["advice"]}
            assert all(v == COMPILE_DEFAULTS[k[1]] for k, v in caps.items() if k not in advised), caps
            loop.final = {k: v for k, v in caps.items() if k in advised}
            return loop
    raise AssertionError(f"{program}: no final answer after {MAX_RUNS} runs: {loop.history}")


@functools.cache
def loop_result(program: str) -> Loop:
    with tempfile.TemporaryDirectory() as tmp:
        return follow(program, Path(tmp))


@pytest.mark.parametrize("program", list(PROGRAMS))
def test_advise_converges_on_the_runtime_loop(program: str) -> None:
    loop = loop_result(program)
    minimum = bisection_minimum(program)
    assert loop.final
    for scn in PROGRAMS[program]:
        assert sim.accepted(with_caps(scn, loop.final)) == []
        assert completes(scn, loop.final), (program, loop.final, loop.history)
    for (ring, r), value in loop.final.items():
        m = max(v for k, v in minimum.items() if k[1:] == (ring, r))
        assert m <= value <= accept(r, m * 1.25), ((ring, r), value, m, loop.history)
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


def _read(paths: list[Path]) -> list[RunFinished]:
    sink = SummarySink()
    assert read_files(paths, FanOut([sink]), Thresholds()) == []
    return sink.finished


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["advise", "--format", "json", *args])
    return code, json.loads(capsys.readouterr().out)


ADVICE_KEYS = {"ring", "resource", "capacity", "lower_bound", "upper_bound", "estimate", "recommended", "basis",
               "reason", "measure_next", "action"}


def test_advise_json_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _tree(tmp_path, PROGRAMS["heap_bound"][0])
    code, obj = _json(capsys, str(path))
    assert code == 0
    [f] = obj["files"]
    assert set(f) == {"path", "labels", "advice", "run_config", "kernel_fixes", "evidence"}
    assert f["advice"] and all(set(a) == ADVICE_KEYS for a in f["advice"])
    assert {(a["ring"], a["resource"]) for a in f["advice"]} == {(r, res) for r in (1, 2) for res in RESOURCES}
    assert all(a["basis"] == "oversized" and a["recommended"] is None and a["measure_next"] for a in f["advice"])
    assert all(a["upper_bound"] == a["capacity"] for a in f["advice"])  # it completed
    assert f["run_config"]["ring_heap"][3] == 0  # ring 3 unused: left at the compile default
    [p] = obj["programs"]
    assert set(p) == {"program", "sources", "runs", "final", "advice", "run_config", "blocked", "notes", "grouped_by",
                      "covers"}
    assert p["program"] == "prog" and p["runs"] == 1 and p["sources"] == [str(path)] and not p["final"]
    assert all(set(a) == ADVICE_KEYS | {"driven_by"} for a in p["advice"])
    assert all(a["driven_by"] == "prog_20261201_000000" for a in p["advice"])
    # the complete RunConfig relative to the compile defaults: every resource in use has a value
    caps = caps_of(p["run_config"])
    for a in p["advice"]:
        assert caps[(a["ring"], a["resource"])] == a["measure_next"] <= a["upper_bound"]
    # the same per-file advice list in summary --format json
    assert main(["summary", "--format", "json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["advice"] == f["advice"]


def test_advise_table_leads_with_the_program_and_headroom_counts(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    scn = PROGRAMS["window_bound"][0]
    path = _tree(tmp_path, scn)
    assert main(["advise", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("prog: 1 run(s), measure") and "RunConfig for the next run" in out
    assert "ring 1 task_window" in out and str(path) not in out  # per-file sections only with --each
    assert main(["advise", "--each", str(path)]) == 0
    assert str(path) in capsys.readouterr().out
    # --headroom is what a final answer keeps over the proven need: a run at the measured sizes closes the
    # brackets, and a wider headroom recommends more
    _, first = _json(capsys, str(path))
    caps = caps_of(first["programs"][0]["run_config"])
    _tree(tmp_path, with_caps(scn, caps), "prog_20261201_000001")
    _, zero = _json(capsys, "--headroom", "0", str(tmp_path))
    _, big = _json(capsys, "--headroom", "1", str(tmp_path))
    heap = {a["ring"]: a for a in zero["programs"][0]["advice"] if a["resource"] == "heap"}
    heap_big = {a["ring"]: a for a in big["programs"][0]["advice"] if a["resource"] == "heap"}
    assert heap and all(heap[r]["recommended"] < heap_big[r]["recommended"] for r in heap)
    assert main(["advise", "--headroom", "-1", str(path)]) == 2


def test_statements_on_bad_input(tmp_path: Path) -> None:
    def advice_of(scn: sim.Scenario, name: str) -> RunAdvice:
        [fin] = _read([_tree(tmp_path, scn, name)])
        return advise(fin.summary, HEADROOM, fin.source.path, fin.source.labels)

    base = PROGRAMS["heap_bound"][0]
    dropped = advice_of(msgspec.structs.replace(base, drop_rate=0.2, seed=9), "dropped_20261201_000000")
    assert {a.basis for a in dropped.advice} == {"dropped"}
    assert all(a.estimate is None and a.recommended is None and "dropped" in a.reason for a in dropped.advice)
    assert all(a.upper_bound == a.capacity for a in dropped.advice)  # its capacities are still proof
    v4 = advice_of(msgspec.structs.replace(base, version=4), "v4_20261201_000000")
    assert {a.resource for a in v4.advice} == {"task_window", "heap"}  # no dep pool to advise on
    # no capacities (0 = unknown): nothing proven, no measurement suggested, no made-up recommendation
    path = _tree(tmp_path, base, "nocap_20261201_000000")
    lines = path.read_bytes().split(b"\n", 1)
    meta = json.loads(lines[0])
    meta.update(task_window_max=[0] * 4, heap_max=[0] * 4, dep_pool_max=[0] * 4)
    path.write_bytes(json.dumps(meta).encode() + b"\n" + lines[1])
    [fin] = _read([path])
    nocap = advise(fin.summary)
    assert nocap.advice and all(a.capacity is None and a.recommended is None and a.measure_next is None
                                and "unknown" in a.reason for a in nocap.advice)
    assert nocap.run_config == ()


def _wedged(tmp: Path, caps: dict[tuple[int, str], int], name: str) -> list[RunFinished]:
    """A run that wedges, exported on failure (as the hardware path does): the file, no host log."""
    return _read([_tree(tmp, with_caps(PROGRAMS["heap_bound"][0], caps), name)])


def test_a_wedged_file_proves_its_ring_short_and_completed_runs_bound_the_need(tmp_path: Path) -> None:
    m = bisection_minimum("heap_bound")[("", 2, "heap")]
    ok = _read([_tree(tmp_path, with_caps(PROGRAMS["heap_bound"][0], {(2, "heap"): m}), "heap_bound_20261201_000001")])
    bad = _wedged(tmp_path, {(2, "heap"): m - _KIB}, "heap_bound_20261201_000002")
    assert bad[0].summary.wedged
    facts = [RunFacts(f.source.path, f.source.labels, f.summary, f.host_log, f.wedge_causes) for f in ok + bad]
    [answer] = advise_programs(facts, HEADROOM)
    a = next(a for a in answer.advice if (a.ring, a.resource) == (2, "heap"))
    assert (a.lower_bound, a.upper_bound) == (m, m)  # wedged at m - 1 KiB: the need is over it
    lo = m - _KIB + 1  # headroom over the proven need, and over the completion as far as the bracket allows
    assert a.recommended == max(accept("heap", lo * (1 + HEADROOM)), min(accept("heap", m * (1 + HEADROOM)),
                                                                         accept("heap", lo * 1.25)))
    assert "wedged" in a.reason and a.driven_by == "heap_bound_20261201_000002"
    alone = advise_runs(facts[1:], HEADROOM)[0]
    a = next(a for a in alone.advice if (a.ring, a.resource) == (2, "heap"))
    assert a.upper_bound is None and a.recommended is None and (a.measure_next or 0) > m - _KIB


def test_a_failure_sizing_cannot_fix_gives_no_run_config(tmp_path: Path) -> None:
    run = tmp_path / "outputs" / "prog_20261201_000001"
    run.mkdir(parents=True)
    (run / "host.log").write_text(
        "[ERROR] validate_runtime_impl: [runtime_maker.cpp:1019] PTO2 runtime failed: orch_error_code=8 "
        "sched_error_code=0 runtime_status=-8\n")
    _tree(tmp_path, PROGRAMS["heap_bound"][0], "prog_20261201_000000")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["advise", "--format", "json", "--host-log", str(run / "host.log"), str(tmp_path)]) == 0
    [p] = json.loads(buf.getvalue())["programs"]
    assert p["runs"] == 2 and p["run_config"] == {} and not p["final"]
    assert len(p["blocked"]) == 1 and "TENSOR_WAIT_TIMEOUT" in p["blocked"][0]


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
    for command in ("summary", "check"):
        main([command, str(tmp_path)])
        out = capsys.readouterr().out
        head = out.split("\n\n", 1)[0]
        rows = [line.split()[0] for line in head.splitlines()[2:] if not line.startswith(" ")]  # less wrapped cells
        assert "2 sources" in head and rows == ["b", "a"], command  # problems first
        body = out.split("\n\n", 1)[1]
        assert "b_20261201" in body, command
        if command == "check":  # one line per source after the overview, as before
            assert "ok " in body and "FAIL " in body
            continue
        assert "a_20261201" not in body  # details only where there are errors or warnings, unless --details
        main([command, "--details", str(tmp_path)])
        assert "a_20261201" in capsys.readouterr().out.split("\n\n", 1)[1]
    main(["advise", "--each", str(tmp_path)])  # two programs (a, b): their answers, then the overview
    out = capsys.readouterr().out
    assert out.index("a: 1 run(s)") < out.index("2 sources") and out.index("b: 1 run(s)") < out.index("2 sources")


def table() -> str:
    """The README table: per program its binding resource, the bisection minimum, the final answer, runs."""
    rows = ["| program | binding (ring/resource) | bisection minimum | final | ratio | worst ratio (any resource) "
            "| runs |", "|---|---|---|---|---|---|---|"]
    for program in PROGRAMS:
        m = bisection_minimum(program)
        need = {k[1:]: max(v for q, v in m.items() if q[1:] == k[1:]) for k in m}
        key = max(need, key=lambda k: need[k] / (8192 if k[1] == "heap" else 8))
        loop = loop_result(program)
        unit = (lambda v: f"{v / 1024:g} KiB") if key[1] == "heap" else str
        worst = max(v / need[k] for k, v in loop.final.items())
        rows.append(f"| {program} | {key[0]}/{key[1]} | {unit(need[key])} | {unit(loop.final[key])} | "
                    f"{loop.final[key] / need[key]:.2f} | {worst:.2f} | {loop.runs} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())


def test_the_configured_headroom_is_honoured_in_every_runs_advice(write_jsonl: WriteJsonl,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # one scope holds 90 KiB of a 100 KiB ring and completed: the bracket [90, 100] KiB is closed, and what the
    # answer keeps over the proven need is the headroom
    path = write_jsonl(with_totals([rec("(unknown):0", "begin", 0), rec("s", "begin", 1, heap=(0, 0)),
                                    rec("s", "end", 1, heap=(0, 90 * _KIB)), rec("(unknown):0", "end", 0)],
                                   heap=100 * _KIB), "prog_20261201_000000/scope_stats/scope_stats.jsonl")

    def heap_next(headroom: str | None) -> dict[int, int]:
        if headroom is None:
            monkeypatch.delenv("RINGTRACE_HEADROOM", raising=False)
        else:
            monkeypatch.setenv("RINGTRACE_HEADROOM", headroom)
        assert main(["summary", "--format", "json", str(path)]) == 0
        advice = json.loads(capsys.readouterr().out)["files"][0]["advice"]
        return {a["ring"]: a["recommended"] for a in advice if a["resource"] == "heap"}

    default, wide = heap_next(None), heap_next("1")
    assert default and all(wide[r] > default[r] for r in default)  # summary's per-run advice (and /metrics')
