"""Faults in one file or directory stay there: a real ``ringtrace watch`` process over trees that hold
an unreadable directory, a FIFO, symbolic-link loops, names that are not UTF-8, and files that come
and go.  Every test asserts what was emitted (once, with the right figures), that the process is
still serving, and that SIGTERM ends it with 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests._support.agent import NO_DAC, Agent, events, put_run
from tests._support.require import require
from tests._support.samples import NESTED, SMALL
from tests._support.writer import wait_for


def test_an_unreadable_directory_costs_only_itself(tmp_path: Path, agents: list[Agent]) -> None:
    require(shutil.which("setpriv") is not None, "setpriv not installed (util-linux)")
    probe = subprocess.run([*NO_DAC, "true"], capture_output=True)
    require(probe.returncode == 0, f"cannot drop capabilities here: {probe.stderr.decode().strip()}")
    root = tmp_path / "tree"
    secret = root / "secret" / "inner"
    secret.mkdir(parents=True)
    put_run(root, "before")
    os.chown(root / "secret", 65534, 65534)
    os.chmod(root / "secret", 0o700)
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, prefix=NO_DAC)
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    put_run(root, "after")  # an event in a readable directory still arrives
    later = root / "later"
    later.mkdir()
    os.chown(later, 65534, 65534)
    os.chmod(later, 0o700)  # and a directory that appears unreadable later does not stop it either
    put_run(root, "after2")
    wait_for(lambda: {e["labels"]["run"] for e in events(ev)} == {"before", "after", "after2"},
             what="the three readable runs")
    assert "secret" in a.stderr() and "Permission denied" in a.stderr()
    assert a.proc.poll() is None and a.ready()
    code, _ = a.stop()
    assert code == 0
    assert len(events(ev)) == 3  # each run once


def test_a_fifo_named_like_a_scope_stats_file_is_skipped(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    fifo_dir = root / "fifo" / "scope_stats"
    fifo_dir.mkdir(parents=True)
    os.mkfifo(fifo_dir / "scope_stats.jsonl")
    put_run(root, "real", NESTED)
    ev = tmp_path / "ev-once.jsonl"
    once = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(root), "--once", "--events", str(ev)],
                          capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    assert [e["labels"]["run"] for e in events(ev)] == ["real"]
    assert "not a regular file" in once.stderr
    ev2 = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev2)
    agents.append(a)
    wait_for(lambda: len(events(ev2)) == 1 and a.ready(), what="the real run and /readyz")
    code, _ = a.stop()
    assert code == 0


def test_symlink_loops_and_links_to_runs_emit_each_run_once(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    put_run(root, "run_x", NESTED)
    put_run(root, "run_y")
    (root / "loop").symlink_to(".")
    (root / "run_x" / "up").symlink_to("..")
    (root / "latest").symlink_to("run_x")
    ev = tmp_path / "ev.jsonl"
    once = subprocess.run([sys.executable, "-m", "ringtrace", "watch", f"{root}/**/scope_stats.jsonl", "--once",
                           "--events", str(ev)], capture_output=True, text=True, timeout=60)
    assert once.returncode == 0, once.stderr
    assert sorted(e["labels"]["run"] for e in events(ev)) == ["run_x", "run_y"]
    ev2 = tmp_path / "ev2.jsonl"
    a = Agent(f"{root}/**/scope_stats.jsonl", ev2)
    agents.append(a)
    wait_for(lambda: len(events(ev2)) == 2 and a.ready(), what="the two runs")
    put_run(root, "run_z")
    (root / "latest_z").symlink_to("run_z")
    wait_for(lambda: len(events(ev2)) == 3, what="the new run")
    code, _ = a.stop()
    assert code == 0
    assert sorted(e["labels"]["run"] for e in events(ev2)) == ["run_x", "run_y", "run_z"]


def test_a_directory_name_that_is_not_utf8(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev)
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    bad = os.fsencode(root) + b"/caf\xe9_run/scope_stats"
    os.makedirs(bad)
    shutil.copy(SMALL, os.fsdecode(bad + b"/scope_stats.jsonl"))
    put_run(root, "plain")  # events keep flowing after the bad name
    wait_for(lambda: len(events(ev)) == 2, what="both runs")
    runs = sorted(e["labels"]["run"] for e in events(ev))
    assert runs == ["caf\ufffd_run", "plain"]
    code, body = a.get("/metrics")
    assert code == 200 and 'run="caf\ufffd_run"' in body
    assert "polling" not in a.stderr()  # events did not fall back to polling
    code, _ = a.stop()
    assert code == 0


def test_deleted_files_are_forgotten(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    state = tmp_path / "state"
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, "--state-dir", str(state))
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    for rnd in range(3):
        paths = [put_run(root, f"r{rnd}_{i:03d}") for i in range(100)]
        def arrived(n: int = rnd) -> bool:
            return len(events(ev)) == 100 * (n + 1)

        wait_for(arrived, what=f"round {rnd}")
        wait_for(lambda: a.metric("ringtrace_files_watched") == 100, what="100 files watched")
        for p in paths:
            shutil.rmtree(p.parent.parent)
        wait_for(lambda: a.metric("ringtrace_files_watched") == 0, what="the deleted files forgotten")
    wait_for(lambda: (state / "ringtrace-state.json").exists()
             and json.loads((state / "ringtrace-state.json").read_text())["files"] == {},
             what="the state file to forget them too")
    code, _ = a.stop()
    assert code == 0
    assert len(events(ev)) == 300  # each run once; a deletion after the finish emits nothing


def test_a_file_it_may_not_read_is_logged_and_counted(tmp_path: Path, agents: list[Agent]) -> None:
    require(shutil.which("setpriv") is not None, "setpriv not installed (util-linux)")
    probe = subprocess.run([*NO_DAC, "true"], capture_output=True)
    require(probe.returncode == 0, f"cannot drop capabilities here: {probe.stderr.decode().strip()}")
    root = tmp_path / "tree"
    locked = put_run(root, "locked")
    os.chown(locked, 65534, 65534)
    os.chmod(locked, 0o600)
    put_run(root, "open")
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, prefix=NO_DAC)
    agents.append(a)
    wait_for(lambda: len(events(ev)) == 1 and (a.metric("ringtrace_read_errors_total") or 0) >= 1,
             what="the readable run and the read error counted")
    assert f"{locked}: cannot read" in a.stderr()
    os.chmod(locked, 0o644)  # readable again: read at the next rescan
    wait_for(lambda: len(events(ev)) == 2, what="the unlocked run")
    code, _ = a.stop()
    assert code == 0


def test_a_file_replaced_by_a_directory(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    path = put_run(root, "run", NESTED)
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev)
    agents.append(a)
    wait_for(lambda: len(events(ev)) == 1, what="the run")
    path.unlink()
    path.mkdir()
    put_run(root, "next")
    wait_for(lambda: len(events(ev)) == 2, what="the next run")
    assert a.proc.poll() is None and a.ready()
    code, _ = a.stop()
    assert code == 0


def test_sigterm_in_the_middle_of_a_backlog(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    for i in range(300):
        put_run(root, f"run{i:03d}", NESTED)
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, "--state-dir", str(tmp_path / "state"))
    agents.append(a)
    wait_for(lambda: len(events(ev)) >= 3, what="the backlog to be read")
    code, _ = a.stop()  # the time it takes: tests/bench/bench_agent.py
    assert code == 0
    assert 3 <= len(events(ev)) < 300  # it stopped mid-backlog
    assert len({e["labels"]["run"] for e in events(ev)}) == len(events(ev))
