"""The package's public API: importing it stays light, and the pure stages work through it.

(That every name in ``ringtrace.__all__`` exists is ruff's F822.)
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import ringtrace
from tests._support.samples import SAMPLES


def test_importing_ringtrace_pulls_in_no_exporter_library() -> None:
    code = ("import sys, ringtrace; print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'rich', 'prometheus_client', 'opentelemetry', 'watchfiles', 'grpc', 'google'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("command", ["summary", "check"])
def test_summary_and_check_load_no_exporter_library(command: str) -> None:
    sample = SAMPLES / "outputs" / "TestScopeStats_default_20261130_101210"
    code = ("import sys\nfrom ringtrace import cli\n"
            f"code = cli.main([{command!r}, {str(sample)!r}])\n"
            "print(code, sorted({m.split('.')[0] for m in sys.modules} & "
            "{'prometheus_client', 'opentelemetry', 'grpc', 'google', 'aiohttp', 'yaml', 'bcrypt', 'watchfiles', "
            "'asyncinotify', 'aiofiles'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    exit_code, loaded = out.stdout.splitlines()[-1].split(" ", 1)
    assert exit_code in ("0", "1") and loaded == "[]"  # the command ran (check may fail the gate) and loaded none


def test_summary_as_json_imports_no_rich_unless_it_prints_through_it() -> None:
    """The consoles are made when a command first prints through them (``cli.common.Consoles``): ``summary
    --format json`` writes its JSON itself, and a clean file has nothing for stderr; a table needs rich."""
    sample = SAMPLES / "outputs" / "TestScopeStats_default_20261130_101210"
    for argv, rich in ((["summary", "--format", "json", str(sample)], False), (["summary", str(sample)], True)):
        code = ("import sys\nfrom ringtrace import cli\n"
                f"code = cli.main({argv!r})\n"
                "print(code, 'rich' in sys.modules)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
        assert out.stdout.splitlines()[-1] == f"0 {rich}", argv


def test_the_pure_stages_work_through_the_public_api() -> None:
    run = ringtrace.Run(ringtrace.Source("x.jsonl"))
    data = (b'{"version": 6, "fatal": false, "dropped": 0, "total": 2, "task_window_max": [4, 4, 4, 4], '
            b'"heap_max": [64, 64, 64, 64], "dep_pool_max": [8, 8, 8, 8], "tensormap_max": 10}\n'
            b'{"site": "a.cpp:1", "phase": "begin", "depth": 1, "ring": 1, "task_window_start": 0, '
            b'"task_window_end": 0, "heap_start": 0, "heap_end": 0, "dep_pool_start": 1, "dep_pool_end": 1, '
            b'"tensormap": 0}\n'
            b'{"site": "a.cpp:1", "phase": "end", "depth": 1, "ring": 1, "task_window_start": 0, '
            b'"task_window_end": 3, "heap_start": 0, "heap_end": 48, "dep_pool_start": 1, "dep_pool_end": 2, '
            b'"tensormap": 1}\n')
    events = run.feed(data) + run.finish("eof")
    fin = events[-1]
    assert isinstance(fin, ringtrace.RunFinished)
    heap = next(p for p in fin.summary.peaks if p.ring == 1 and p.resource == "heap")
    assert (heap.high_water, heap.high_water_ratio, fin.summary.complete) == (48, 0.75, True)
