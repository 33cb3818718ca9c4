"""``ringtrace advise`` against the true minimal ring sizes of real programs (golden).

``tests/fixtures/sizing/`` is a copy of the runs the runtime itself (simpler's ``a2a3sim``) left
while each program's smallest completing size was bisected (``minimal_sizes.json``, ``runs.json``,
its README): a completed run as its scope_stats file, a failed run as its host log only.  Every
run's own proof must bracket the true minimum (a run at the minimum, or one below it, proves it
exactly), and the program's pooled answer must close every bracket within [minimum, 1.25 x minimum]
before rounding to what the runtime accepts (it is final only once a run at those sizes completes:
``tests/analysis/test_advise_realsim.py`` replays the tuning loop's real runs).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from ringtrace.model.runtime import COMPILE_DEFAULTS, accept

SIZING = Path(__file__).parents[1] / "fixtures" / "sizing"
MINIMA = [m for m in json.loads((SIZING / "minimal_sizes.json").read_text()) if not m.get("skipped")]
RUNS = json.loads((SIZING / "runs.json").read_text())
CASES = sorted({m["case"] for m in MINIMA})


def advise(*args: str) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["advise", "--format", "json", *args])
    obj: dict[str, Any] = json.loads(buf.getvalue())
    assert code == 0, obj
    return obj


def entry(answer: dict[str, Any], ring: int, resource: str) -> dict[str, Any] | None:
    return next((a for a in answer["advice"] if (a["ring"], a["resource"]) == (ring, resource)), None)


def run_args(run: dict[str, Any]) -> list[str]:
    folder = SIZING / run["run"]
    log = folder / "host.log"
    return ["--host-log", str(log)] if not run["completed"] else [str(folder)]


@pytest.mark.parametrize("run", RUNS, ids=[r["run"].split("/")[-1] for r in RUNS])
def test_every_run_alone_brackets_the_true_minimum(run: dict[str, Any]) -> None:
    [answer] = advise(*run_args(run))["programs"]
    s = run["set"]
    for m in (m for m in MINIMA if m["case"] == run["case"]):
        here = s.get(m["resource"]) if isinstance(s, dict) else None
        a = entry(answer, m["ring"], m["resource"])
        if not run["completed"]:  # a host log alone speaks of the one resource it names, and of no other
            named = here is not None and here["ring"] == m["ring"]
            assert (a is not None) == named, (m, answer)
            if named and m["resource"] == "dep_pool":  # its report names no ring: raised on every ring, and said
                assert here is not None
                assert any("does not name" in n for n in answer["notes"]), answer
                assert {e["ring"] for e in answer["advice"] if e["resource"] == "dep_pool"} == {0, 1, 2, 3}
                assert all(e["lower_bound"] > here["value"] for e in answer["advice"]), answer  # a floor
            if a is None:
                continue
        assert a is not None, (m, answer)
        assert a["lower_bound"] is None or a["lower_bound"] <= m["min_pass"], (a, m)
        assert a["upper_bound"] is None or a["upper_bound"] >= m["min_pass"], (a, m)
        if here is None or here["ring"] != m["ring"]:
            continue
        if run["completed"] and here["value"] == m["min_pass"]:  # completed at the minimum: proven enough
            assert a["upper_bound"] == m["min_pass"], (a, m)
        if not run["completed"] and here["value"] == m["max_fail"]:  # failed just below: proven short
            assert a["lower_bound"] == m["min_pass"], (a, m)
            assert a["upper_bound"] in (None, COMPILE_DEFAULTS[m["resource"]])


@pytest.mark.parametrize("case", CASES)
def test_the_pooled_answer_closes_every_bracket_within_a_quarter_of_the_minimum(case: str) -> None:
    """Runs that each shrank one ring of one resource close every bracket, but no run had every size at or
    below the answer's, and the resources interact: the answer is not final until that RunConfig completes."""
    folder = SIZING / case
    [answer] = advise("--host-log", str(folder / "**" / "host.log"), str(folder))["programs"]
    runs = [r for r in RUNS if r["case"] == case]
    assert answer["runs"] == len(runs) and not answer["final"], answer
    assert any("run it once to prove it" in n for n in answer["notes"]), answer
    for m in (m for m in MINIMA if m["case"] == case):
        a = entry(answer, m["ring"], m["resource"])
        assert a is not None, (m, answer)
        rec, low = a["recommended"], m["min_pass"]
        assert a["lower_bound"] <= low <= a["upper_bound"] if a["lower_bound"] else low <= a["upper_bound"], a
        assert low <= rec <= accept(m["resource"], 1.25 * low), (a, m)
        config = answer["run_config"][{"task_window": "ring_task_window", "heap": "ring_heap",
                                       "dep_pool": "ring_dep_pool"}[m["resource"]]]
        assert (config[m["ring"]] if isinstance(config, list) else config) == rec
    # resources nobody uses stay at the compile default: not in the RunConfig's non-zero values
    skipped = [m for m in json.loads((SIZING / "minimal_sizes.json").read_text())
               if m.get("skipped") and m["case"] == case]
    for m in skipped:
        assert entry(answer, m["ring"], m["resource"]) is None, m
