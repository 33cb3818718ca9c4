"""The watcher recovers what inotify loses, and what a pause costs, in a real ``ringtrace watch`` process.

* A real queue overflow: the agent is frozen (SIGSTOP) while 22,000 files and 500 run directories
  (1,000 directories) are created, so the kernel queue (``max_queued_events``) overflows and the
  creations of those directories are lost.  After SIGCONT every directory has a watch again
  (``ringtrace_inotify_watches`` = the directories in the tree, ``ringtrace_inotify_rewatched_total``)
  and a change in one of them is seen, with the next rescan 600 s away (so it was the watch).
* A run directory renamed while its file is written (``mv run_a run_b``): the write after the rename
  is seen through the watch (the rescan is 600 s away), the run is reported once, complete, not cut
  as ``idle``.
* The agent paused (SIGSTOP) three times its idle timeout while the runtime kept writing: on waking it
  reads what was written, it does not call the run idle (a false wedge) and then report it again.

Every wait is a condition with a deadline (a bound on hanging, not a latency); nothing sleeps to
synchronise.  The one wall-clock wait is the pause itself, the fault being injected.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.agent import NO_DAC, Agent, events, put_run
from tests._support.require import require
from tests._support.samples import NESTED
from tests._support.writer import Writer, wait_for


def dirs_in(root: Path) -> int:
    return 1 + sum(len(dirs) for _, dirs, _ in os.walk(root))


def test_a_queue_overflow_gives_every_directory_its_watch_back(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    (root / "junk").mkdir(parents=True)
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, "--rescan-interval", "600", "--idle-timeout", "600")
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    assert a.metric("ringtrace_inotify_watches") == 2 and a.metric("ringtrace_inotify_overflows_total") == 0
    queued = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    files = max(22_000, queued)  # two events each (IN_CREATE, IN_CLOSE_WRITE): the queue overflows on these
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        for i in range(files):
            os.close(os.open(root / "junk" / f"f{i:05d}", os.O_CREAT | os.O_WRONLY, 0o644))
        for i in range(500):  # their creations come after the overflow: lost
            (root / f"run{i:03d}" / "scope_stats").mkdir(parents=True)
        put_run(root, "probe")  # a complete run in a new directory: found by the rescan the overflow asks for
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    n = dirs_in(root)
    assert n == 1 + 1 + 1000 + 2
    wait_for(lambda: (a.metric("ringtrace_inotify_overflows_total") or 0) >= 1, timeout=30, what="the overflow")
    wait_for(lambda: a.metric("ringtrace_inotify_watches") == n, timeout=30, what="every directory watched again")
    assert (a.metric("ringtrace_inotify_rewatched_total") or 0) >= 1000
    assert a.metric("ringtrace_inotify_unwatched_directories") == 0
    assert "inotify queue overflowed" in a.stderr()
    wait_for(lambda: [e["labels"]["run"] for e in events(ev)] == ["probe"], timeout=30, what="the rescan's run")
    put_run(root, "run499")  # a directory whose creation event was lost: seen through its new watch
    wait_for(lambda: following(a, "run499"), what="the change in a re-watched directory")
    wait_for(lambda: len(events(ev)) == 2, what="its finish")
    code, _ = a.stop()
    assert code == 0
    assert [e["labels"]["run"] for e in events(ev)] == ["probe", "run499"]


def following(a: Agent, run: str) -> bool:
    """The agent has read records of ``run`` (its series are on /metrics)."""
    code, body = a.get("/metrics")
    return code == 200 and any(line.startswith("ringtrace_run_records{") and f'run="{run}"' in line
                               for line in body.splitlines())


def run_records(a: Agent) -> float | None:
    """``ringtrace_run_records`` of the one run the agent follows."""
    return a.metric("ringtrace_run_records")


@pytest.mark.parametrize("mode", ["inotify", "poll"])
def test_a_run_directory_renamed_mid_write_is_one_run(tmp_path: Path, agents: list[Agent],
                                                      writer: Writer, mode: str) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    ev = tmp_path / "ev.jsonl"
    extra = ["--poll", "--poll-interval", "0.1"] if mode == "poll" else []
    a = Agent(str(root), ev, "--rescan-interval", "600", "--idle-timeout", "600", *extra)
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    data = NESTED.read_bytes()
    c1, c2 = len(data) // 3, 2 * len(data) // 3
    path = root / "run_a" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=path.parent)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:c1])
    wait_for(lambda: run_records(a) == data[:c1].count(b"\n") - 1, what="the first third read")
    writer.do("rename", src=root / "run_a", dst=root / "run_b")
    writer.do("write", data=data[c1:c2])  # through the open file, now under run_b
    wait_for(lambda: run_records(a) == data[:c2].count(b"\n") - 1, what="the write after the rename")
    writer.do("write", data=data[c2:])
    writer.do("close")
    wait_for(lambda: run_records(a) == 1362, what="the whole run read")
    assert a.metric("ringtrace_runs_started_total") == 1  # one run, not a second one read from the start
    if mode == "inotify":
        wait_for(lambda: len(events(ev)) == 1, what="the run's finish")
    # with --poll a run that was written less than ``settle`` ago waits for the tick, which polling
    # starves (poll_active queues every active file before each tick): it is reported at the stop
    code, _ = a.stop()  # a second, cut copy of the run would be reported here too (as shutdown)
    assert code == 0
    (got,) = events(ev)
    assert got["reason"] == ("complete" if mode == "inotify" else got["reason"])
    assert got["records"] == 1362 and got["wedged"] == [] and got["labels"]["run"] == "run_a"


def test_a_directory_it_may_not_watch_is_counted(tmp_path: Path, agents: list[Agent]) -> None:
    require(shutil.which("setpriv") is not None, "setpriv not installed (util-linux)")
    probe = subprocess.run([*NO_DAC, "true"], capture_output=True)
    require(probe.returncode == 0, f"cannot drop capabilities here: {probe.stderr.decode().strip()}")
    root = tmp_path / "tree"
    (root / "secret" / "inner").mkdir(parents=True)
    put_run(root, "open")
    os.chown(root / "secret", 65534, 65534)
    os.chmod(root / "secret", 0o700)
    a = Agent(str(root), tmp_path / "ev.jsonl", prefix=NO_DAC)
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    assert a.metric("ringtrace_inotify_unwatched_directories") == 1  # secret (inner is out of reach)
    assert a.metric("ringtrace_inotify_watches") == 3  # the root, open, open/scope_stats
    assert "secret: cannot watch" in a.stderr()
    assert a.stop()[0] == 0


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """``pid`` stopped (SIGSTOP) for the block, then continued (SIGCONT): a pause of the agent."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_pause_longer_than_the_idle_timeout_is_no_false_wedge(tmp_path: Path, agents: list[Agent],
                                                               writer: Writer) -> None:
    """The agent is stopped for 3 s with ``--idle-timeout 1`` while the runtime writes the rest of the run:
    on waking it reads that rest and reports the run once, complete, nothing wedged (it used to call the run
    idle with its open scopes wedged, then report the same run again as complete)."""
    root = tmp_path / "tree"
    root.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, "--rescan-interval", "600", "--idle-timeout", "1")
    agents.append(a)
    wait_for(a.ready, what="the agent to be ready")
    data = NESTED.read_bytes()
    cut = data.index(b"\n", len(data) // 3) + 1
    path = root / "run" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=path.parent)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:cut])
    wait_for(lambda: run_records(a) == data[:cut].count(b"\n") - 1, what="the first third read")
    with stopped(a.proc.pid):
        writer.do("write", data=data[cut:])  # the runtime goes on while the agent is stopped
        writer.do("close")
        time.sleep(3.0)  # the pause, three idle timeouts long: the fault under test, not a synchronisation
    wait_for(lambda: len(events(ev)) >= 1, what="the run's finish")
    code, _ = a.stop()
    assert code == 0
    assert [(e["reason"], e["records"], e["wedged"]) for e in events(ev)] == [("complete", 1362, [])]
