"""Exactly once without the state file: ``ringtrace watch --state-dir`` over 200 runs whose events file is
larger than 1 MiB (the old dedupe window), restarted after its state file was lost in every way we know
(garbage, half its JSON, empty, a directory in its place, a full disk under the state directory then
kill -9, a read-only state directory).  Real processes; after each restart no run key is in the
events file twice, and the fault was said once, clearly."""

from __future__ import annotations

import json
import logging
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests._support.agent import Agent
from tests._support.samples import NESTED
from tests._support.tmpfs import fill, small_tmpfs
from tests._support.writer import wait_for

RUNS = 200
STATE = "ringtrace-state.json"


def lines(ev: Path) -> list[dict[str, object]]:
    *whole, _tail = ev.read_bytes().split(b"\n")
    return [json.loads(x) for x in whole]


def doubled(ev: Path) -> dict[str, int]:
    """Run keys written more than once (nothing else may hold)."""
    return {k: n for k, n in Counter(str(e["run_key"]) for e in lines(ev)).items() if n > 1}


def watch_once(tree: Path, state: Path, ev: Path) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--state-dir", str(state),
                        "--events", str(ev)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A tree of RUNS runs, and a first pass's events file, key index and state (copied by each test)."""
    base = tmp_path_factory.mktemp("statefaults")
    tree = base / "tree"
    for i in range(RUNS):
        d = tree / f"run{i:03d}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(NESTED, d / "scope_stats.jsonl")
    out = base / "first"
    out.mkdir()
    watch_once(tree, out / "state", out / "events.jsonl")
    assert len(lines(out / "events.jsonl")) == RUNS
    assert (out / "events.jsonl").stat().st_size > 1 << 20  # past the old dedupe's 1 MiB window
    return tree, out


@pytest.fixture
def setup(first: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    """(tree, state dir, events file) of this test: the first pass's, copied."""
    tree, out = first
    shutil.copytree(out, tmp_path / "out")
    return tree, tmp_path / "out" / "state", tmp_path / "out" / "events.jsonl"


def put_fault(state: Path, fault: str) -> None:
    path = state / STATE
    good = path.read_bytes()
    if fault == "garbage":
        path.write_bytes(b"\x00\x13not json at all\xff" * 50)
    elif fault == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif fault == "empty":
        path.write_bytes(b"")
    elif fault == "not-a-state":
        path.write_bytes(b'{"files": [1, 2, 3]}')
    elif fault == "directory":
        path.unlink()
        (path / "inner").mkdir(parents=True)
        (path / "inner" / "x").write_bytes(b"x")


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["garbage", "truncated", "empty", "not-a-state", "directory"])
def test_an_unusable_state_file_is_moved_aside_and_nothing_is_written_twice(
        setup: tuple[Path, Path, Path], fault: str) -> None:
    tree, state, ev = setup
    before = ev.read_bytes()
    put_fault(state, fault)
    r = watch_once(tree, state, ev)
    assert r.stderr.count("saved state unusable") == 1, r.stderr
    assert "moved aside to ringtrace-state.json.corrupt-" in r.stderr
    aside = list(state.glob(STATE + ".corrupt-*"))
    assert len(aside) == 1 and (aside[0].is_dir() if fault == "directory" else aside[0].is_file())
    assert (state / STATE).is_file()  # saving works again
    assert ev.read_bytes() == before and doubled(ev) == {}  # every run was read again, none written again
    again = watch_once(tree, state, ev)  # and the next start has its state back: no fault, nothing new
    assert "saved state unusable" not in again.stderr and "cannot save state" not in again.stderr
    assert ev.read_bytes() == before


@pytest.mark.slow
def test_a_full_disk_under_the_state_dir_then_kill_9(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    tree, _state, ev = setup
    ev.unlink()
    Path(str(ev) + ".keys").unlink()  # a fresh events file: this agent writes all of it
    with small_tmpfs(tmp_path / "mnt", "1m") as mnt:
        state = mnt / "state"
        a = Agent(str(tree), ev, "--state-dir", str(state), "--idle-timeout", "600")
        try:
            wait_for(lambda: ev.exists() and len(lines(ev)) >= 20 and (state / STATE).exists(), timeout=60,
                     what="some runs and a saved state")
            a.proc.send_signal(signal.SIGSTOP)  # frozen while the disk fills: it cannot save everything first
            fill(mnt, free=0)  # from now on no save fits
            a.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: len(lines(ev)) == RUNS, timeout=120, what="every run")
            wait_for(lambda: "cannot save state" in a.stderr(), what="the failed save to be said")
            saved = json.loads((state / STATE).read_bytes())  # the last good one is still in place
            assert sum(f["finished"] for f in saved["files"].values()) < RUNS
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=30)
        finally:
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()
        assert a.stderr().count("cannot save state") == 1  # loud once, not at every save
        watch_once(tree, state, ev)  # the disk is still full: the restart reads the unsaved runs again
        assert doubled(ev) == {} and len(lines(ev)) == RUNS


@pytest.mark.slow
def test_a_read_only_state_dir(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    tree, _state, ev = setup
    ev.unlink()
    Path(str(ev) + ".keys").unlink()
    with small_tmpfs(tmp_path / "mnt", "1m") as mnt:
        state = mnt / "state"
        state.mkdir()
        r = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        a = Agent(str(tree), ev, "--state-dir", str(state), "--idle-timeout", "600")
        try:
            wait_for(lambda: ev.exists() and len(lines(ev)) == RUNS, timeout=120, what="every run")
            wait_for(lambda: "cannot save state" in a.stderr(), what="the failed save to be said")
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=30)
        finally:
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()
        assert a.stderr().count("cannot save state") == 1 and "Read-only file system" in a.stderr()
        r = watch_once(tree, state, ev)  # nothing was ever saved: every run is read again, none written again
        assert "cannot save state" in r.stderr
        assert doubled(ev) == {} and len(lines(ev)) == RUNS


@pytest.mark.slow
def test_lost_state_and_a_restart_mid_backlog(setup: tuple[Path, Path, Path]) -> None:
    """The state deleted outright between kills of a service in the middle of its backlog."""
    tree, state, ev = setup
    ev.unlink()
    Path(str(ev) + ".keys").unlink()
    shutil.rmtree(state)
    for target in (50, 120):
        a = Agent(str(tree), ev, "--state-dir", str(state), "--idle-timeout", "600")
        try:
            wait_for(lambda n=target: ev.exists() and len(lines(ev)) >= n, timeout=120,  # type: ignore[misc]
                     what=f"{target} runs")
            a.proc.send_signal(signal.SIGKILL)
            a.proc.wait(timeout=30)
        finally:
            if a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()
        shutil.rmtree(state, ignore_errors=True)
    watch_once(tree, state, ev)
    assert doubled(ev) == {} and len(lines(ev)) == RUNS




def test_a_directory_appearing_in_the_state_file_s_place_is_moved_aside(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    from ringtrace.reading.tail.state import State, Store

    store = Store(tmp_path / "state")
    assert store.load() == State()  # no state yet: nothing said
    assert store.save(State())
    (tmp_path / "state" / STATE).unlink()
    (tmp_path / "state" / STATE / "x").mkdir(parents=True)
    with caplog.at_level(logging.WARNING, logger="ringtrace.reading.tail.state"):
        assert store.save(State())
    assert "a directory in the state file's place; moved aside to ringtrace-state.json.corrupt-" in caplog.text
    assert (tmp_path / "state" / STATE).is_file()


def test_failed_saves_are_said_once_and_the_recovery_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from ringtrace.reading.tail.state import State, Store

    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    store = Store(blocker / "state")  # its parent is a file: every save fails
    with caplog.at_level(logging.WARNING, logger="ringtrace.reading.tail.state"):
        assert not any(store.save(State()) for _ in range(5))
        assert caplog.text.count("cannot save state in") == 1
        blocker.unlink()
        blocker.mkdir()
        assert store.save(State())
    assert "state saved again in" in caplog.text and "after 5 failed save(s)" in caplog.text
