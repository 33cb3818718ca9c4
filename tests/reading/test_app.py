"""``ringtrace watch`` as a real process, fed by a real writer process.

Synchronisation is by conditions with deadlines: the events file (one JSON line per finished
run) is read until it holds what the test waits for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests._support.agent import Agent, Proc, events
from tests._support.samples import NESTED, PAGED, SAMPLES
from tests._support.writer import Writer, wait_for


def probe(root: Path, writer: Writer, ev: Path, name: str = "probe") -> None:
    """Write a small complete file and wait until the watcher reports it: events are flowing."""
    d = root / name / "scope_stats"
    writer.do("mkdir", path=d)
    writer.do("copy", src=SAMPLES / "outputs/TestScopeStats_default_20261130_101210/scope_stats/scope_stats.jsonl",
              dst=d / "scope_stats.jsonl")
    wait_for(lambda: any(e["labels"]["run"] == name for e in events(ev)), what="the probe run")


def test_new_run_directories_and_200_files_at_once(tmp_path: Path, writer: Writer, agents: list[Proc]) -> None:
    root = tmp_path / "build_output"
    root.mkdir()
    ev = tmp_path / "events.jsonl"
    agents.append(Agent(str(root), ev, "--idle-timeout", "60", "--rescan-interval", "600"))
    probe(root, writer, ev)
    run = root / "nested_l3_20261130_120000" / "dfx_outputs"
    for rank in range(20):
        for d in range(10):
            folder = run / f"rank{rank}" / f"d{d}" / "scope_stats"
            writer.do("mkdir", path=folder)
            writer.do("copy", src=PAGED, dst=folder / "scope_stats.jsonl")
    wait_for(lambda: len(events(ev)) == 201, timeout=60, what="201 finished runs")
    got = [e for e in events(ev) if e["labels"]["run"] == "nested_l3_20261130_120000"]
    assert len(got) == 200
    assert {(e["labels"]["rank"], e["labels"]["dispatch"]) for e in got} == {
        (str(r), str(d)) for r in range(20) for d in range(10)}
    assert {e["reason"] for e in got} == {"complete"}
    assert {e["scopes"] for e in got} == {992}


def test_sigterm_finishes_open_runs_flushes_and_exits_0(tmp_path: Path, writer: Writer,
                                                       agents: list[Proc]) -> None:
    root = tmp_path / "w"
    root.mkdir()
    ev = tmp_path / "events.jsonl"
    w = Agent(str(root), ev, "--idle-timeout", "600")
    agents.append(w)
    probe(root, writer, ev)
    path = root / "cut" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=path.parent)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=NESTED.read_bytes()[:50_000])
    writer.do("close")

    def cut_read() -> bool:  # the watcher has read the cut file's records (not only found it)
        code, body = w.get("/metrics")
        return code == 200 and any(line.startswith("ringtrace_run_records{") and 'run="cut"' in line
                   and float(line.rsplit(" ", 1)[1]) > 100 for line in body.splitlines())

    wait_for(cut_read, what="the watcher to read the cut file")
    # the run is open (not complete, not idle): nothing is emitted for it until shutdown
    assert w.stop()[0] == 0
    cut = [e for e in events(ev) if e["labels"]["run"] == "cut"]
    assert len(cut) == 1 and cut[0]["reason"] == "shutdown"
    assert cut[0]["wedged"] == []  # a shutdown does not call open scopes wedged
    assert cut[0]["records"] > 100


def test_once_reads_everything_and_exits(tmp_path: Path) -> None:
    ev = tmp_path / "ev.jsonl"
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(SAMPLES), "--once", "--events", str(ev)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = events(ev)
    assert len(got) == 10
    by_run = {e["labels"]["run"]: e for e in got if not e["labels"]["rank"]}
    wedged = by_run["NestedScopes_window4_flow_control_deadlock"]["wedged"]
    assert wedged[-1]["site"] == "nested_dummy_small_orch.cpp:75"
    # the two failed runs that left only a host log are runs too, read to their end
    log_only = {r for r, e in by_run.items() if e["records"] == 0}
    assert log_only == {"VectorExample_dep_pool4", "VectorExample_heap128k_abort"}
    assert all(by_run[r]["reason"] == "eof" and by_run[r]["verdict"]["kind"] == "failed" for r in log_only)
    assert all(e["reason"] == "complete" for e in got if e["labels"]["run"] not in log_only)


def test_poll_mode_follows_a_file(tmp_path: Path, writer: Writer, agents: list[Proc]) -> None:
    root = tmp_path / "w"
    root.mkdir()
    ev = tmp_path / "events.jsonl"
    agents.append(Agent(str(root), ev, "--poll", "--poll-interval", "0.05", "--rescan-interval", "0.2"))
    path = root / "run1" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=path.parent)
    data = PAGED.read_bytes()
    writer.write_file(path, data, [1000, 50_000, 300_000])
    wait_for(lambda: len(events(ev)) == 1, what="the run in poll mode")
    assert events(ev)[0]["scopes"] == 992 and events(ev)[0]["reason"] == "complete"
    # rewrite in place: a new run of the same path
    writer.write_file(path, NESTED.read_bytes(), [10])
    wait_for(lambda: len(events(ev)) == 2, what="the rewritten run")
    assert events(ev)[1]["scopes"] == 681


def test_state_dir_restart_resumes_and_skips_finished(tmp_path: Path, writer: Writer, agents: list[Proc]) -> None:
    root = tmp_path / "w"
    shutil.copytree(SAMPLES / "outputs", root)
    state = tmp_path / "state"
    ev1 = tmp_path / "ev1.jsonl"
    w = Agent(str(root), ev1, "--state-dir", str(state), "--idle-timeout", "600")
    agents.append(w)
    wait_for(lambda: len(events(ev1)) == 4, what="the four sample runs")
    cut = root / "later" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=cut.parent)
    data = NESTED.read_bytes()
    writer.do("open", path=cut, mode="w")
    writer.do("write", data=data[:40_000])
    wait_for(lambda: f"following {cut}" in w.stderr(), what="the watcher to follow the cut file")
    assert w.stop()[0] == 0
    # with --state-dir an open run is not reported at shutdown: the restart reads it whole, once
    assert [e["reason"] for e in events(ev1) if e["labels"]["run"] == "later"] == []
    # the writer finishes the file while ringtrace is down
    writer.do("write", data=data[40_000:])
    writer.do("close")
    ev2 = tmp_path / "ev2.jsonl"
    w2 = Agent(str(root), ev2, "--state-dir", str(state), "--idle-timeout", "600")
    agents.append(w2)
    wait_for(lambda: len(events(ev2)) >= 1, what="the resumed run")
    assert w2.stop()[0] == 0
    got = events(ev2)
    assert [(e["labels"]["run"], e["reason"], e["records"]) for e in got] == [("later", "complete", 1362)]


def test_missing_root_is_watched_once_it_appears(tmp_path: Path, writer: Writer, agents: list[Proc]) -> None:
    root = tmp_path / "not-yet"
    ev = tmp_path / "events.jsonl"
    w = Agent(str(root), ev, "--rescan-interval", "0.2")
    agents.append(w)
    wait_for(lambda: "does not exist" in w.stderr(), what="the warning about the missing root")
    writer.do("mkdir", path=root / "r" / "scope_stats")
    writer.do("copy", src=PAGED, dst=root / "r" / "scope_stats" / "scope_stats.jsonl")
    wait_for(lambda: len(events(ev)) == 1, what="the run under the late root")
    assert w.stop()[0] == 0


@pytest.mark.skipif(not hasattr(os, "pipe"), reason="posix only")
def test_unknown_flag_is_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tmp_path), "--idle-timeout", "-1"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "idle-timeout" in proc.stderr and "Traceback" not in proc.stderr
