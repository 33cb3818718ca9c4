"""``watch --host-log-glob``: a run's host log, found relative to its run directory and read at its
finish, confirms the wedge in the events file and shows on /metrics as ``ringtrace_run_failed``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests._writer import wait_for
from tests.conftest import SAMPLES
from tests.tail.test_faults import Agent, agents, events  # noqa: F401 - the fixture

HEAP = SAMPLES / "failed" / "HeapRingDeadlock"


def test_once_reads_the_host_log_beside_the_run(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(HEAP, tree / "HeapRingDeadlock")
    ev = tmp_path / "ev.jsonl"
    done = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev),
                           "--host-log-glob", "*.log"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (got,) = events(ev)
    assert got["host_log"]["orch_error_code"] == 2
    assert got["host_log"]["path"].endswith("HeapRingDeadlock/host.log")
    wedged = next(f for f in got["findings"] if f["rule"] == "wedged")
    assert wedged["confirmed"] is True
    # without the flag the same run has no host log
    ev2 = tmp_path / "ev2.jsonl"
    subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev2)],
                   check=True, capture_output=True, timeout=60)
    assert events(ev2)[0]["host_log"] is None


def test_the_service_shows_the_failure_on_metrics(tmp_path: Path, agents: list[Agent]) -> None:  # noqa: F811
    tree = tmp_path / "tree"
    tree.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(tree), ev, "--host-log-glob", "*.log")
    agents.append(a)
    wait_for(a.ready, what="the agent")
    shutil.copytree(HEAP, tree / "run")  # the run directory appears with its log and records
    wait_for(lambda: len(events(ev)) == 1, what="the failed run")
    code, body = a.get("/metrics")
    assert code == 200
    failed = [line for line in body.decode().splitlines() if line.startswith("ringtrace_run_failed{")]
    assert len(failed) == 1 and 'code="2"' in failed[0] and failed[0].endswith(" 1.0")
    assert a.stop()[0] == 0
