"""The one verdict per run (``ringtrace.stages.verdict``), on files and host logs the runtime itself wrote.

Each kind on a real run; then the rules that make it honest, checked on real runs of the runtime's simulator:
a run at exactly its need is told it has no headroom only when its records prove that need; a run with twice
the need on a ring gets no alarm for it; the verdict and the advice for a run never contradict each other.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ringtrace import gather
from ringtrace.config import Thresholds
from ringtrace.hostlog.read import read_log
from ringtrace.model.records import RunFinished, Source
from ringtrace.stages.need import proven_need
from ringtrace.stages.run import Run, log_only_run
from tests._support.samples import BGEMM, FAILED, FLOW, PAGED, SAMPLE_FILES

FIXTURES = Path(__file__).parents[1] / "fixtures"
SIZING = FIXTURES / "sizing"
REALSIM = FIXTURES / "realsim"
RUNS = json.loads((SIZING / "runs.json").read_text())
MINIMA = [m for m in json.loads((SIZING / "minimal_sizes.json").read_text()) if not m.get("skipped")]


def finish(path: Path, log: Path | None = None, reason: str = "eof") -> RunFinished:
    run = Run(Source(str(path)), Thresholds(), host_log=read_log(log)[0] if log is not None else None)
    run.feed(path.read_bytes())
    fin = run.finish(reason)[-1]  # type: ignore[arg-type]
    assert isinstance(fin, RunFinished)
    return fin


def read_tree(root: Path) -> list[RunFinished]:
    """Every run under ``root`` as the commands read it: files, their folders' host logs, log-only runs."""
    got = gather.read(gather.plan([str(root)]), Thresholds())
    assert got.errors == []
    return got.runs


# -- each kind on a real run -------------------------------------------------------------------------


def test_a_wedged_run_names_its_site_ring_and_the_logs_code() -> None:
    v = finish(FLOW, FLOW.parents[2] / "host.log").verdict
    assert (v.kind, v.severity, v.ring, v.site, v.code, v.code_name) == (
        "wedged", "error", 3, "nested_dummy_small_orch.cpp:75", 3, "FLOW_CONTROL_DEADLOCK")
    assert v.text == "wedged in nested_dummy_small_orch.cpp:75 (depth 4, ring 3, line 6): FLOW_CONTROL_DEADLOCK"
    assert v.short == "wedged nested_dummy_small_orch.cpp:75, ring 3 task_window, FLOW_CONTROL_DEADLOCK"


def test_a_failed_run_without_records_is_failed_with_its_code() -> None:
    [log] = read_log(FAILED / "VectorExample_dep_pool4" / "host.log")
    v = log_only_run(log)[1].verdict
    assert (v.kind, v.severity, v.code, v.resource) == ("failed", "error", 4, "dep_pool")
    assert v.text.startswith("failed: orch_error_code=4 DEP_POOL_OVERFLOW")


def test_a_cut_file_is_cut_short_with_no_code_and_no_site(tmp_path: Path) -> None:
    """21 of the tight paged-attention run's 1,984 records: the metadata's total tells it from a wedge."""
    cut = tmp_path / "scope_stats.jsonl"
    cut.write_bytes(b"".join(PAGED.read_bytes().splitlines(keepends=True)[:22]))
    fin = finish(cut)
    v = fin.verdict
    assert (v.kind, v.severity, v.code, v.site) == ("cut_short", "error", None, None)
    assert f"{fin.summary.missing} of its records missing" in v.text and fin.summary.missing == 1984 - 21
    assert not fin.summary.wedged and fin.summary.open


def test_a_test_that_failed_on_numbers_is_test_failed_not_a_wedge() -> None:
    """A paged-attention run on the simulator: bf16 under clang fails its golden check at every size, after
    the run completed (no orch_error_code): its sizes sufficed."""
    run = next(p for p in sorted((REALSIM / "loops" / "pa_var4" / "outputs").iterdir())
               if (p / "scope_stats").is_dir())
    [fin] = read_tree(run)
    assert fin.host_log is not None and fin.host_log.test_failure is not None
    v = fin.verdict
    assert (v.kind, v.severity) == ("test_failed", "error") and "Golden mismatch" in v.text
    assert "sizes sufficed" in v.text and not fin.summary.wedged


def test_a_completed_default_run_is_healthy_and_says_its_largest_proven_need() -> None:
    v = finish(BGEMM).verdict
    assert (v.kind, v.severity, v.ring, v.resource) == ("healthy", "ok", 1, "heap")
    assert v.text == "completed; largest proven need: ring 1 heap 512.0 KiB of 256.0 MiB (0%)"


def test_a_run_the_reader_stopped_is_unknown() -> None:
    v = finish(BGEMM, reason="shutdown").verdict
    assert (v.kind, v.severity) == ("unknown", "info")


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.parts[-4])
def test_every_samples_verdict_is_one_line_and_agrees_with_its_findings(path: Path) -> None:
    fin = finish(path)
    v = fin.verdict
    assert "\n" not in v.text and v.text
    errors = {f.rule for f in fin.findings if f.severity == "error"}
    assert v.fails_check == bool(errors), (v, errors)


# -- the rules, on the runtime's own runs -----------------------------------------------------------


def _at(run: dict[str, Any]) -> tuple[str, int, int] | None:
    s = run["set"]
    return None if not isinstance(s, dict) else next((r, v["ring"], v["value"]) for r, v in s.items())


AT_NEED = [r for r in RUNS if r["completed"] and _at(r) is not None and any(
    m["case"] == r["case"] and (m["resource"], m["ring"], m["min_pass"]) == _at(r) for m in MINIMA)]


@pytest.mark.parametrize("run", AT_NEED, ids=[r["run"].split("/")[-1] for r in AT_NEED])
def test_a_run_at_exactly_its_need_has_no_headroom_only_where_its_records_prove_that_need(run: dict[str, Any]
                                                                                          ) -> None:
    at = _at(run)
    assert at is not None
    resource, ring, size = at
    [fin] = read_tree(SIZING / run["run"])
    peak = next(p for p in fin.summary.peaks if (p.ring, p.resource) == (ring, resource))
    proven = proven_need(peak, fin.summary).value
    v = fin.verdict
    if proven >= size:  # the records prove the whole capacity is needed
        assert (v.kind, v.ring, v.resource) == ("no_headroom", ring, resource), v
    else:  # they do not: no alarm on that ring, and the verdict says a smaller run would tell
        assert not (v.kind in ("no_headroom", "near_capacity") and (v.ring, v.resource) == (ring, resource)), v
        assert v.kind != "no_headroom" or (v.ring, v.resource) != (ring, resource)
    assert not v.fails_check


def test_the_verdict_and_the_advice_never_contradict_on_any_fixture() -> None:
    """A warning that says "raise" rests on a proven need at or near capacity: the advice for that ring and
    resource then never proposes a smaller size."""
    fins = [*read_tree(FIXTURES / "samples"), *read_tree(SIZING), *read_tree(REALSIM)]
    assert len(fins) > 30
    for fin in fins:
        v = fin.verdict
        if v.kind not in ("no_headroom", "near_capacity") or fin.advice is None:
            continue
        a = next(a for a in fin.advice.advice if (a.ring, a.resource) == (v.ring, v.resource))
        assert not a.shrink and (a.recommended or a.measure_next or 0) >= (a.capacity or 0), (fin.source.path, v, a)


def test_a_copied_run_folder_keeps_its_verdict(tmp_path: Path) -> None:
    """The verdict rests on the run's own files, not on where they lie."""
    src = next(p for p in sorted((SIZING / "vector" / "outputs").iterdir()) if (p / "scope_stats").is_dir())
    shutil.copytree(src, tmp_path / src.name)
    assert [f.verdict for f in read_tree(tmp_path)] == [f.verdict for f in read_tree(src)]


TWICE: list[dict[str, Any]] = json.loads((REALSIM / "twice.json").read_text())


@pytest.mark.parametrize("run", TWICE, ids=[f"{r['program']}-{r['resource']}-r{r['ring']}" for r in TWICE])
def test_a_run_with_twice_the_need_on_a_ring_gets_no_alarm_for_it(run: dict[str, Any]) -> None:
    """Runs of the runtime's simulator with one ring and resource at twice its need (every other size at the
    program's defaults): no warning and no check failure rests on that ring and resource."""
    [fin] = [f for f in read_tree(REALSIM / "twice" / run["dir"]) if f.source.path]
    v = fin.verdict
    where = (run["ring"], run["resource"])
    assert not (v.kind in ("no_headroom", "near_capacity") and (v.ring, v.resource) == where), v
    assert not [f for f in fin.findings if f.severity != "info" and (f.ring, f.resource) == where]
    assert v.kind in ("healthy", "test_failed"), v
