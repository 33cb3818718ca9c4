"""``watch`` talks like a tool: one line at start (roots, outputs), one per finished run (run, verdict,
worst resource), one at exit, on stderr in the configured ``--log-format``; ``--quiet`` keeps it silent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.samples import SAMPLES

pytestmark = pytest.mark.slow  # each test runs a watch process


def watch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringtrace", "watch", *args], capture_output=True, text=True,
                          timeout=120)


def test_start_run_and_exit_lines(tmp_path: Path) -> None:
    r = watch(str(SAMPLES / "failed"), str(SAMPLES / "outputs"), "--once", "--events", str(tmp_path / "e.jsonl"))
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0].startswith("ringtrace: INFO: watching ") and f"events: {tmp_path / 'e.jsonl'}" in lines[0]
    finished = [line for line in lines if "run finished: " in line]
    events = (tmp_path / "e.jsonl").read_text().splitlines()
    assert len(finished) == len(events) == 8  # the two failed runs known from their host logs alone too
    assert any("NestedScopes_window4_flow_control_deadlock: error: wedged in nested_dummy_small_orch.cpp:75 "
               "(depth 4, ring 3" in f for f in finished)
    assert any("VectorExample_dep_pool4 (host log only): error: failed: orch_error_code=4 DEP_POOL_OVERFLOW" in f
               for f in finished)
    assert any("TestPagedAttention_big16x2048_tight_20261130_101530: ok: completed" in f and
               "largest proven need ring 2 task_window 31%" in f for f in finished)
    assert lines[-1] == "ringtrace: INFO: stopped (exit 0): 8 run(s) finished"


def test_json_log_format_and_quiet(tmp_path: Path) -> None:
    r = watch(str(SAMPLES / "outputs"), "--once", "--log-format", "json")
    records = [json.loads(line) for line in r.stderr.splitlines()]
    assert r.returncode == 0 and len(records) == 2 + 4
    assert {x["logger"] for x in records} == {"ringtrace.watch"} and {x["level"] for x in records} == {"info"}
    q = watch(str(SAMPLES / "outputs"), "--once", "--quiet")
    assert q.returncode == 0 and q.stderr == ""
