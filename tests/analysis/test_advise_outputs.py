"""``ringtrace advise outputs/`` on a user's own folder, made by the runtime itself: one answer per case.

``tests/fixtures/realsim/outputs/`` is one pytest session's ``outputs/`` as users have it: whole scene-test classes
of simpler run on its CPU simulator (``a2a3sim``; paged attention's four cases, batch paged attention's five,
bgemm's six, the dep-generation chain's four), every case at its compile defaults, then with every ring's dep
pool at 4 (a failure that leaves only a ``host.log``), then each case's tuning loop followed in that same folder
(``advise outputs/``, the case's RunConfig next, until final), then the final RunConfig three more times.
``outputs.json`` lists every run in order: its case, the sizes it was given, how it ended, and whether it
confirmed a final answer.  ``minima.json`` has the bisected one-resource needs of the cases that have them.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from ringtrace.model.runtime import COMPILE_DEFAULTS, CONFIG_KEYS, KIB, RESOURCES, RINGS, accept

REALSIM = Path(__file__).parents[1] / "fixtures" / "realsim"
OUTPUTS = REALSIM / "outputs"
META: dict[str, Any] = json.loads((REALSIM / "outputs.json").read_text()) if OUTPUTS.is_dir() else {"runs": []}
RUNS: list[dict[str, Any]] = META["runs"]
MINIMA: list[dict[str, Any]] = json.loads((REALSIM / "minima.json").read_text())
CASES = sorted({r["label"] for r in RUNS})
Key = tuple[int, str]


def advise(folder: Path) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["advise", "--format", "json", str(folder)]) == 0
    out: dict[str, Any] = json.loads(buf.getvalue())
    return out


@pytest.fixture(scope="module")
def answer() -> dict[str, Any]:
    return advise(OUTPUTS)


def program(answer: dict[str, Any], label: str) -> dict[str, Any]:
    [p] = [p for p in answer["programs"] if p["program"] == label]
    assert isinstance(p, dict)
    return p


def sizes(run_config: dict[str, Any]) -> dict[Key, int]:
    """A program's RunConfig as per-ring capacities (0: the compile default)."""
    out = {}
    for res, key in CONFIG_KEYS.items():
        value = run_config.get(key, 0)
        for ring, v in enumerate(value if isinstance(value, list) else [value] * RINGS):
            out[(ring, res)] = v or COMPILE_DEFAULTS[res]
    return out


def given(run: dict[str, Any]) -> dict[Key, int]:
    """The sizes a run was given (run_case's flags; 0 and unset: the compile default)."""
    return {(ring, res): (run["config"].get(res) or [0] * RINGS)[ring] or COMPILE_DEFAULTS[res]
            for ring in range(RINGS) for res in RESOURCES}


def needs(label: str) -> dict[Key, int]:
    case = next(r["case"] for r in RUNS if r["label"] == label)
    return {(m["ring"], m["resource"]): m["min_pass"] for m in MINIMA if m["case"].endswith(case.split("::", 1)[-1])
            and m["case"].split("::")[-2:] == case.split("::")[-2:]}


_GIVE_UP = re.compile(r"FATAL: Task Allocator Deadlock - (Heap Exhausted|Task Ring Full)! ring=(\d)")


def load_not_size(run: dict[str, Any]) -> bool:
    """A failure the allocator's ~500 ms wall-clock give-up made (``No reclaim progress``) at a size of its ring
    and resource that completed in another run of the case: the realsim README's "re-run before believing a
    single failure" (a loaded 2-core machine), not a shortfall.  Read off the host log, not off ringtrace."""
    text = (OUTPUTS / run["dir"] / "host.log").read_text(errors="replace")
    m = _GIVE_UP.search(text)
    if run["completed"] or m is None or "No reclaim progress" not in text:
        return False
    key = (int(m.group(2)), "heap" if m.group(1) == "Heap Exhausted" else "task_window")
    return any(given(r)[key] <= given(run)[key] for r in RUNS if r["label"] == run["label"] and r["completed"])


def allowed(resource: str, need: int) -> int:
    """At most 1.25x the need, plus the runtime's granule (a whole KiB of heap; a window's power of two; one
    dep-pool entry)."""
    if resource == "task_window":
        return accept(resource, need)
    return int(need * 1.25) + (KIB if resource == "heap" else 1)


def test_the_folder_holds_whole_classes_failures_and_confirmations() -> None:
    if not RUNS:
        pytest.fail("tests/fixtures/realsim/outputs is missing")
    classes = {label.split("_", 1)[0] for label in CASES}
    assert {"TestPagedAttention", "TestBatchPagedAttention", "TestBenchmarkBgemm", "TestDepGenChain"} <= classes
    assert any(not r["completed"] for r in RUNS) and any(r.get("confirm") for r in RUNS)
    for r in RUNS:  # a failed run left its host log alone, as the runtime's simulator does
        ran = OUTPUTS / r["dir"]
        assert (ran / "host.log").is_file() and (ran / "scope_stats").is_dir() == bool(r["completed"]), r


def test_one_program_per_case_named_by_the_runtimes_layout(answer: dict[str, Any]) -> None:
    cases = [p for p in answer["programs"] if not p["covers"]]
    assert sorted(p["program"] for p in cases) == CASES
    for p in cases:
        assert p["grouped_by"] == "case name"
        assert p["runs"] == sum(1 for r in RUNS if r["label"] == p["program"]), p["program"]
        assert all(Path(s).parent.name.startswith(p["program"] + "_") or Path(s).parents[1].name.startswith(
            p["program"] + "_") for s in p["sources"])


@pytest.mark.parametrize("label", CASES)
def test_true_brackets(answer: dict[str, Any], label: str) -> None:
    """Task window and heap (their proofs are structure, not timing): the proven lower bound never exceeds the
    bisected need, and a completion never proves less than it."""
    p = program(answer, label)
    for a in p["advice"]:
        need = needs(label).get((a["ring"], a["resource"]))
        if need is None or a["resource"] == "dep_pool":
            continue
        assert a["lower_bound"] is None or a["lower_bound"] <= need, (a, need)
        assert a["upper_bound"] is None or a["upper_bound"] >= need, (a, need)


@pytest.mark.parametrize("label", CASES)
def test_nothing_is_proposed_at_or_below_a_size_that_failed(answer: dict[str, Any], label: str) -> None:
    """The answer's RunConfig is never at or below every size of a run of that case that failed: it raises the
    failing resource above the failed size (and a report that names no ring raises every ring at that size)."""
    proposal = sizes(program(answer, label)["run_config"])
    for run in (r for r in RUNS if r["label"] == label and not r["completed"] and not load_not_size(r)):
        failed = given(run)
        assert any(proposal[k] > failed[k] for k in failed), (run["dir"], proposal)


@pytest.mark.parametrize("label", CASES)
def test_a_final_answer_keeps_within_a_quarter_of_the_need(answer: dict[str, Any], label: str) -> None:
    p = program(answer, label)
    if not p["final"]:
        pytest.fail(f"{label} is not final: {p['notes']} {p['blocked']}")
    final = sizes(p["run_config"])
    for a in p["advice"]:
        key = (a["ring"], a["resource"])
        need = max(needs(label).get(key, 0), a["lower_bound"] or 0)
        assert final[key] <= allowed(a["resource"], need), (a, need)


@pytest.mark.parametrize("label", sorted(META.get("finals", {})))
def test_a_final_runconfig_completes_on_every_confirming_run(label: str, tmp_path: Path) -> None:
    """The last round of confirmations (every round's outcomes: the next test): the answer over the runs before it
    was final, and its RunConfig completed every time it was run again on the runtime, but where the allocator's
    wall-clock give-up failed a run at a size that completed (load: :func:`load_not_size`); with every run,
    confirmations included, the answer stays final."""
    last = max(r.get("confirm", 0) for r in RUNS if r["label"] == label)  # each round ran today's final again
    confirms = [r for r in RUNS if r["label"] == label and r.get("confirm") == last]
    assert len(confirms) == 3 and all(r["completed"] or load_not_size(r) for r in confirms), confirms
    assert sum(r["completed"] for r in confirms) >= 2, confirms
    tree = tmp_path / "outputs"
    tree.mkdir()
    for r in RUNS:
        if r["label"] == label and r.get("confirm") != last:
            shutil.copytree(OUTPUTS / r["dir"], tree / r["dir"])
    before = program(advise(tmp_path), label)
    assert before["final"]
    assert sizes(before["run_config"]) == given(confirms[0])
    after = program(advise(OUTPUTS), label)  # the confirmations are evidence too: a dep pool's count is timing,
    assert after["final"]  # so the most seen can grow (its answer with it, within 1.25x); nothing else moves
    for k, v in sizes(after["run_config"]).items():
        assert v == given(confirms[0])[k] if k[1] != "dep_pool" else v >= given(confirms[0])[k], (k, v)
    for r in confirms:
        if not r["completed"]:  # set aside, and said
            assert any(r["dir"] in n and "wall-clock give-up" in n for n in after["notes"]), after["notes"]


def test_the_covering_answer_is_the_largest_of_its_cases(answer: dict[str, Any]) -> None:
    covering = [p for p in answer["programs"] if p["covers"]]
    assert covering, "no class's cases share their kernels"
    for cover in covering:
        cases = [program(answer, name) for name in cover["covers"]]
        assert len(cases) >= 2 and cover["grouped_by"] == "covering"
        assert cover["program"] == f"{cover['covers'][0].split('_', 1)[0]} (covering {len(cases)} cases)"
        want: dict[Key, int] = {}
        for c in cases:
            for a in c["advice"]:
                value = a["recommended"] if a["recommended"] is not None else a["measure_next"]
                want[(a["ring"], a["resource"])] = max(want.get((a["ring"], a["resource"]), 0), value)
        got = {(a["ring"], a["resource"]): a["recommended"] if a["recommended"] is not None else a["measure_next"]
               for a in cover["advice"]}
        assert got == want
        assert cover["final"] == all(c["final"] for c in cases)


def test_every_confirming_run_of_every_round_completed_but_for_load() -> None:
    confirms = [r for r in RUNS if r.get("confirm")]
    assert len(confirms) >= 3 * len(CASES)
    assert all(r["completed"] or load_not_size(r) for r in confirms), [r["dir"] for r in confirms if not r["completed"]]
