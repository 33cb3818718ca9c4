"""``cli.text.render_run``: what ``summary`` prints for one run, from real runtime files.

Each case reads a real file through the one-shot reader, renders it into a recording console and
checks the text against the run's own records: every wedged scope by line, every finding, one
table row per ring and resource in use, no line wider than the console and none ending in spaces.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from ringtrace.cli.text import render_run
from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import RunFinished
from ringtrace.sinks import FanOut
from ringtrace.sinks.summary import SummarySink
from tests._support.samples import SAMPLES

WEDGED = SAMPLES / "failed" / "HeapRingDeadlock" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
CLEAN = SAMPLES / "outputs" / "NestedScopes_small_20261130_101702" / "scope_stats" / "scope_stats.jsonl"


def finished(path: Path) -> RunFinished:
    sink = SummarySink()
    assert read_files([path], FanOut([sink]), Thresholds()) == []
    (fin,) = sink.finished
    return fin


def rendered(fin: RunFinished, width: int) -> list[str]:
    console = Console(width=width, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    render_run(console, fin)
    lines = console.export_text().splitlines()
    console.file.close()
    return lines


@pytest.mark.parametrize("width", [80, 100, 120])
def test_a_wedged_run_lists_every_wedged_scope_and_finding(width: int) -> None:
    fin = finished(WEDGED)
    assert fin.summary.wedged, "the sample is a wedged run"
    lines = rendered(fin, width)
    text = "\n".join(lines)
    assert text.replace("\n", "").startswith(str(WEDGED))  # a long path folds, whole
    assert "wedged scopes" in text
    for w in fin.summary.wedged:
        assert any(line.strip().startswith(f"line {w.line}: {w.site}") for line in lines), w
    squashed = " ".join(text.split())
    for f in fin.findings:
        assert f"{f.severity} {f.rule}:" in squashed
        assert " ".join(f.message.split())[:40] in squashed  # wrapped at the width, never cut
    assert max(map(len, lines)) <= width
    assert [line for line in lines if line.endswith(" ")] == []  # no line padded with spaces
    verdict = next(i for i, line in enumerate(lines) if line.startswith("  verdict "))
    header = next(i for i, line in enumerate(lines) if line.startswith("ring "))
    assert header - verdict >= 2 and all(line.startswith("  ") for line in lines[verdict:header])  # wrapped, indented


def test_a_clean_run_has_one_row_per_ring_and_resource_and_no_wedge() -> None:
    fin = finished(CLEAN)
    lines = rendered(fin, 120)
    assert not fin.summary.wedged
    assert "wedged scopes" not in "\n".join(lines)
    used = [(str(p.ring), p.resource) for p in fin.summary.peaks if p.scopes]
    assert used
    rows = [tuple(line.split()[:2]) for line in lines]
    for key in used:
        assert rows.count(key) == 1, key
    assert rows.count(("-", "tensormap")) == 1
