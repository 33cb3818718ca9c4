"""``ringtrace advise`` on the tuning loop as users ran it on the runtime itself (golden, from real runs).

``tests/fixtures/realsim/`` holds what the loop left on simpler's own CPU simulator (``a2a3sim``, the
tensormap_and_ringbuffer executor; see its README): per program the runs in the scene-test layout, in
order (a completed run as its scope_stats file, gzipped; a failed run as its host log only), ``loops.json``
(each run's sizes and outcome, the final RunConfig and whether it completed when run once more) and
``minima.json`` (the need: each ring's and resource's smallest size that completes, bisected on the same
simulator with every other size at the program's defaults).  Every claim below is checked against those
runs, not against ``ringtrace.demo.sim``.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from ringtrace.model.runtime import COMPILE_DEFAULTS, CONFIG_KEYS, KIB, accept

REALSIM = Path(__file__).parents[1] / "fixtures" / "realsim"
LOOPS: dict[str, Any] = json.loads((REALSIM / "loops.json").read_text())
MINIMA: list[dict[str, Any]] = json.loads((REALSIM / "minima.json").read_text())
MAX_RUNS = 8


def answer(folder: Path) -> dict[str, Any]:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["advise", "--format", "json", str(folder)])
    out: dict[str, Any] = json.loads(buf.getvalue())
    assert code == 0, out
    [program] = out["programs"]
    assert isinstance(program, dict)
    return program


def sizes(run_config: dict[str, Any]) -> dict[tuple[int, str], int]:
    """A RunConfig as per-ring capacities (0: the compile default)."""
    out = {}
    for res, key in CONFIG_KEYS.items():
        value = run_config.get(key, 0)
        for ring, v in enumerate(value if isinstance(value, list) else [value] * 4):
            out[(ring, res)] = v or COMPILE_DEFAULTS[res]
    return out


def allowed(resource: str, need: int) -> int:
    """At most 1.25x the need, plus the runtime's granule (a whole KiB of heap; a window's power of two; one
    dep-pool entry)."""
    if resource == "task_window":
        return accept(resource, need)
    return int(need * 1.25) + (KIB if resource == "heap" else 1)


@pytest.mark.parametrize("program", sorted(LOOPS))
def test_the_loop_is_final_within_8_runs_and_the_final_runconfig_completed(program: str) -> None:
    loop = LOOPS[program]
    folder = REALSIM / "loops" / program
    runs = sorted(p for p in (folder / "outputs").iterdir() if p.is_dir())
    assert len(runs) == len(loop["runs"]) <= MAX_RUNS
    got = answer(folder)
    assert got["final"] and got["blocked"] == [], got
    confirm = loop["confirm"]  # today's final RunConfig, run again on the runtime three or five times
    assert sizes(got["run_config"]) == sizes(confirm["run_config"])
    runs = confirm["runs"]
    assert len(runs) >= 3 and sum(r["completed"] for r in runs) >= len(runs) - 1, runs
    assert all(r["completed"] or r["give_up"] for r in runs), runs  # but the allocator's wall-clock give-up (load)
    if sizes(loop["final"]) == sizes(confirm["run_config"]):
        assert loop["final_completed"], loop  # what the loop itself ran once more completed too


@pytest.mark.parametrize("program", sorted(LOOPS))
def test_every_final_size_is_within_a_quarter_of_the_need(program: str) -> None:
    final = sizes(LOOPS[program]["confirm"]["run_config"])
    needs = [m for m in MINIMA if m["program"] == program]
    assert needs, program
    for m in needs:
        key = (m["ring"], m["resource"])
        assert final[key] <= allowed(m["resource"], m["min_pass"]), (m, final[key])


@pytest.mark.parametrize("program", sorted(LOOPS))
def test_every_step_brackets_the_need_and_proposes_what_was_run_next(program: str, tmp_path: Path) -> None:
    """Replay: after each run, advise over the runs so far proposes the sizes of the next run (the loop followed
    it), and its proven lower bounds never exceed the need (task window and heap: their proofs are structure,
    not timing)."""
    loop = LOOPS[program]
    runs = sorted(p for p in (REALSIM / "loops" / program / "outputs").iterdir() if p.is_dir())
    needs = {(m["ring"], m["resource"]): m["min_pass"] for m in MINIMA if m["program"] == program}
    tree = tmp_path / "outputs"
    tree.mkdir()
    for n, run in enumerate(runs):
        shutil.copytree(run, tree / run.name)  # (a directory walk does not follow symbolic links)
        got = answer(tmp_path)
        for a in got["advice"]:
            need = needs.get((a["ring"], a["resource"]))
            if need is not None and a["resource"] != "dep_pool" and a["lower_bound"] is not None:
                assert a["lower_bound"] <= need, (n, a, need)
        if n + 1 < len(runs):
            assert sizes(got["run_config"]) == sizes(loop["runs"][n + 1]["config"]), (n, got["run_config"])
