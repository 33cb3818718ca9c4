"""``watch --host-log-glob``: a run's host log, found relative to its run directory and read at its
finish, confirms the wedge in the events file and shows on /metrics as ``ringtrace_run_failed``; a
failed run that left a host log and no scope_stats file is reported from the log alone, once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.agent import Agent, events
from tests._support.samples import SAMPLES
from tests._support.writer import Writer, wait_for

pytestmark = pytest.mark.slow  # each test runs watch processes

HEAP = SAMPLES / "failed" / "HeapRingDeadlock"
ABORT = SAMPLES / "failed" / "VectorExample_heap128k_abort"  # a host log and no scope_stats file
DEP_POOL = SAMPLES / "failed" / "VectorExample_dep_pool4"  # the same


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
    # without the flag the run folder's host.log is read as summary reads it; a glob elsewhere finds none
    ev2 = tmp_path / "ev2.jsonl"
    subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev2)],
                   check=True, capture_output=True, timeout=60)
    assert events(ev2)[0]["host_log"]["orch_error_code"] == 2
    ev3 = tmp_path / "ev3.jsonl"
    subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev3),
                    "--host-log-glob", "logs/*.log"], check=True, capture_output=True, timeout=60)
    assert events(ev3)[0]["host_log"] is None


def test_the_service_shows_the_failure_on_metrics(tmp_path: Path, agents: list[Agent]) -> None:
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
    failed = [line for line in body.splitlines() if line.startswith("ringtrace_run_failed{")]
    assert len(failed) == 1 and 'code="2"' in failed[0] and failed[0].endswith(" 1.0")
    assert a.stop()[0] == 0


def _watch_once(tree: Path, ev: Path, *extra: str) -> None:
    done = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev),
                           "--host-log-glob", "*.log", *extra], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_failed_run_without_records_is_reported_from_its_log_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for run in (HEAP, ABORT, DEP_POOL):
        shutil.copytree(run, tree / run.name)
    ev, state = tmp_path / "ev.jsonl", tmp_path / "state"
    _watch_once(tree, ev, "--state-dir", str(state))
    got = {e["labels"]["run"]: e for e in events(ev)}
    assert sorted(got) == sorted([HEAP.name, ABORT.name, DEP_POOL.name])
    assert got[HEAP.name]["path"].endswith("scope_stats.jsonl")  # its log went with its records, not alone
    assert got[HEAP.name]["host_log"]["path"].endswith("HeapRingDeadlock/host.log")
    for run in (ABORT, DEP_POOL):
        alone = got[run.name]
        assert alone["path"] is None and alone["records"] == 0 and alone["run_key"].startswith("hostlog:")
        assert alone["host_log"]["path"] == str(tree / run.name / "host.log")
        assert [f["rule"] for f in alone["findings"]] == ["failed"]
        assert alone["host_log"]["orch_error_code"] is not None
    _watch_once(tree, ev, "--state-dir", str(state))  # a restart remembers what it reported
    assert len(events(ev)) == 3
    (tree / ABORT.name / "host.log").write_text((ABORT / "host.log").read_text() + "one more line\n")
    _watch_once(tree, ev, "--state-dir", str(state))  # a log that changed is a new run of it
    again = [e for e in events(ev) if e["labels"]["run"] == ABORT.name]
    assert len(again) == 2 and again[0]["run_key"] != again[1]["run_key"]


def test_the_service_reports_a_log_only_run_when_its_log_stops_changing(
        tmp_path: Path, agents: list[Agent], writer: Writer) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    ev, state = tmp_path / "ev.jsonl", tmp_path / "state"
    a = Agent(str(tree), ev, "--host-log-glob", "*.log", "--idle-timeout", "1", "--state-dir", str(state))
    agents.append(a)
    wait_for(a.ready, what="the agent")
    (tree / ABORT.name).mkdir()
    data = (ABORT / "host.log").read_bytes()
    writer.write_file(tree / ABORT.name / "host.log", data, splits=[len(data) // 3, 2 * len(data) // 3])
    wait_for(lambda: len(events(ev)) == 1, what="the log-only run")
    (got,) = events(ev)
    one_shot = subprocess.run([sys.executable, "-m", "ringtrace", "summary", "--format", "json", "--host-log",
                               str(tree / ABORT.name / "host.log")], capture_output=True, text=True, timeout=60)
    assert got["path"] is None and got["host_log"] == json.loads(one_shot.stdout)["files"][0]["host_log"]  # whole
    code, body = a.get("/metrics")
    failed = [line for line in body.splitlines() if line.startswith("ringtrace_run_failed{")]
    assert code == 200 and len(failed) == 1 and f'run="{ABORT.name}"' in failed[0], failed
    assert a.stop()[0] == 0
    b = Agent(str(tree), ev, "--host-log-glob", "*.log", "--idle-timeout", "1", "--state-dir", str(state))
    agents.append(b)
    wait_for(b.ready, what="the restarted agent")
    shutil.copytree(DEP_POOL, tree / DEP_POOL.name)  # a second one after the restart
    wait_for(lambda: len(events(ev)) == 2, what="the second log-only run")
    assert [e["labels"]["run"] for e in events(ev)] == [ABORT.name, DEP_POOL.name]  # the first not again
    code, body = b.get("/metrics")
    failed = [line for line in body.splitlines() if line.startswith("ringtrace_run_failed{")]
    # the first one's series survived the restart (--state-dir), the second one's came with it
    assert sorted(line.split('run="')[1].split('"')[0] for line in failed) == sorted([ABORT.name, DEP_POOL.name])
    assert b.stop()[0] == 0


def test_a_fifo_named_like_a_host_log_does_not_stop_the_watch(tmp_path: Path) -> None:
    """Reading a FIFO would block the reader thread (and so every file): it is not a log."""
    tree = tmp_path / "tree"
    shutil.copytree(ABORT, tree / ABORT.name)
    (tree / "stuck").mkdir()
    os.mkfifo(tree / "stuck" / "host.log")
    ev = tmp_path / "ev.jsonl"
    _watch_once(tree, ev)
    assert [e["labels"]["run"] for e in events(ev)] == [ABORT.name]
