"""The report reads no record: its charts are the bands the reader folds (``Wants.bands``), and the page is the
same whichever path folded them (the compiled core, or the pure path's ``bands.Folder``)."""

from __future__ import annotations

from pathlib import Path

from ringtrace.model.records import RunFinished, RunProgress, Source, Wants
from ringtrace.report import WIDTH, ReportCollector, render
from ringtrace.sinks import FanOut
from ringtrace.sources.paths import source_labels
from ringtrace.stages import core
from ringtrace.stages.run import Run
from tests._support.require import require
from tests._support.samples import SAMPLES


def page(paths: list[Path], compiled: bool) -> tuple[str, list[RunProgress]]:
    collector = ReportCollector()
    fan = FanOut([collector])
    progress: list[RunProgress] = []
    for path in paths:
        run = Run(Source(str(path), source_labels(path)), wants=fan.wants, compiled=compiled)
        data = path.read_bytes()
        events = [e for i in range(0, len(data), 5000) for e in run.feed(data[i:i + 5000])] + run.finish("eof")
        progress += [e for e in events if isinstance(e, RunProgress)]
        fan.receive_all(events)
    return render(collector, 0.1), progress


def test_the_report_wants_the_bands_alone() -> None:
    assert ReportCollector().wants == Wants(records=False, events=False, bands=WIDTH)
    _, progress = page([sorted(SAMPLES.rglob("scope_stats.jsonl"))[0]], compiled=False)
    assert progress and all(not p.records and not p.events for p in progress)


def test_the_page_is_the_same_on_both_paths() -> None:
    require(core.BUILT, "the compiled reading core was not built (no C compiler?)")
    files = sorted(SAMPLES.rglob("scope_stats.jsonl"))
    for paths in [[f] for f in files] + [files]:
        compiled, _ = page(paths, compiled=True)
        assert compiled == page(paths, compiled=False)[0], paths
    assert '"occ":[[' in compiled and '"high":[[' in compiled  # charts drawn from the bands


def test_a_run_without_bands_has_no_charts() -> None:
    """Fed by a reader that folded no bands (a sink's ``wants`` ignored), a run's section has its figures and
    verdict, and its charts no columns."""
    collector = ReportCollector()
    run = Run(Source(str(f := sorted(SAMPLES.rglob("scope_stats.jsonl"))[0])), compiled=False)
    events = run.feed(f.read_bytes()) + run.finish("eof")
    FanOut([collector]).receive_all(events)
    assert next(e for e in events if isinstance(e, RunFinished)).bands is None
    html = render(collector, 0.1)
    assert '"verdict"' in html and '"occ":[[' not in html and '"high":[[' not in html
