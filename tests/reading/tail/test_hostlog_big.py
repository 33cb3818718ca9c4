"""A 200 MB host log with the failure at its very end, read by a real ``watch --host-log-glob``.

The failure is found (the events say so, /metrics has ``ringtrace_run_failed``), and the read (about
200 MB through the parser, seconds of CPU) happens off the event loop: ``/healthz``, asked every
10 ms while the log is read, answers every time, and a request made after the read began is
answered before it ends (on the loop, none could be).  How fast it answers meanwhile is measured by
``tests/bench/bench_agent.py``, not asserted here.  Both ways a run ends with its log are covered:
complete (the reader's slice) and deleted mid-run (which used to read the log on the loop).  The log
is written once per session.

Also: a failed run known only from its host log, dated a day in the future, is reported after the
idle timeout (the monotonic clock), not a day later.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.agent import Agent, events
from tests._support.healthz import HEAP, Prober, big_host_log, stage_run_with_log
from tests._support.samples import SAMPLES
from tests._support.writer import wait_for

ABORT = SAMPLES / "failed" / "VectorExample_heap128k_abort"
LOG_MB = 200


@pytest.fixture(scope="session")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 MB of the runtime's INFO lines (none the parser reads), then HeapRingDeadlock's log."""
    path = big_host_log(tmp_path_factory.mktemp("hostlog") / "host.log", LOG_MB)
    assert path.stat().st_size > LOG_MB * 1_000_000
    return path


@pytest.fixture
def prober() -> Iterator[list[Prober]]:
    started: list[Prober] = []
    yield started
    for p in started:
        p.stop()


def answered_during_the_read(probe: Prober, base: int, size: int, what: str) -> None:
    """A /healthz request sent once the agent had read a tenth of the log (``size`` bytes past ``base``) was
    answered before it had read nine tenths: the loop answered while the reader thread read the log."""
    lo, hi = base + size // 10, base + 9 * size // 10
    assert any(lo <= a.read_before and a.read_after <= hi for a in probe.answers), \
        f"{what}: no /healthz request was answered while the log was read ({len(probe.answers)} answers in all)"


def test_a_failure_at_the_end_of_a_200_mb_log_is_found_off_the_loop(
        tmp_path: Path, big_log: Path, agents: list[Agent], prober: list[Prober]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(tree), ev, "--host-log-glob", "*.log", "--rescan-interval", "600", "--idle-timeout", "600")
    agents.append(a)
    wait_for(a.ready, what="the agent")
    probe = Prober(a.port, a.proc.pid)
    prober.append(probe)
    wait_for(lambda: len(probe.answers) >= 5, what="/healthz answering")
    size = big_log.stat().st_size

    # a run that completes: the log is read at its finish
    staged = stage_run_with_log(tree, "whole", big_log)
    base = probe.read_bytes()
    staged.rename(staged.with_name("scope_stats.jsonl"))
    wait_for(lambda: len(events(ev)) == 1, timeout=60, what="the complete run with its log")
    answered_during_the_read(probe, base, size, "complete run")
    (got,) = events(ev)
    assert got["reason"] == "complete"
    assert got["host_log"]["failed"] and got["host_log"]["orch_error_code"] == 2
    assert next(f for f in got["findings"] if f["rule"] == "wedged")["confirmed"] is True
    code, body = a.get("/metrics")
    failed = [line for line in body.splitlines() if line.startswith("ringtrace_run_failed{")]
    assert code == 200 and len(failed) == 1 and 'run="whole"' in failed[0] and 'code="2"' in failed[0], failed

    # a run whose file is deleted mid-run (it ends as deleted, with its log)
    cut = tree / "cut" / "dfx_outputs" / "scope_stats"
    cut.mkdir(parents=True)
    os.link(big_log, tree / "cut" / "host.log")
    meta = (HEAP / "dfx_outputs/scope_stats/scope_stats.jsonl").read_bytes().split(b"\n")[0] + b"\n"
    (cut / ".incoming").write_bytes(meta)  # the metadata line alone: the run waits for its record
    (cut / ".incoming").rename(cut / "scope_stats.jsonl")
    wait_for(lambda: f"following {cut / 'scope_stats.jsonl'}" in a.stderr()
             and 'run="cut"' in a.get("/metrics")[1], what="the cut run followed")
    base = probe.read_bytes()
    (cut / "scope_stats.jsonl").unlink()
    wait_for(lambda: len(events(ev)) == 2, timeout=60, what="the deleted run with its log")
    answered_during_the_read(probe, base, size, "deleted run")
    deleted = events(ev)[1]
    assert deleted["reason"] == "deleted" and deleted["labels"]["run"] == "cut"
    assert deleted["host_log"]["failed"] and deleted["host_log"]["orch_error_code"] == 2
    probe.stop()
    assert probe.failures == 0
    assert a.stop()[0] == 0


def test_a_log_only_failure_dated_in_the_future_is_reported_after_the_idle_timeout(
        tmp_path: Path, agents: list[Agent]) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(tree), ev, "--host-log-glob", "*.log", "--idle-timeout", "1")  # rescans every 0.5 s
    agents.append(a)
    wait_for(a.ready, what="the agent")
    staged = tmp_path / ABORT.name
    shutil.copytree(ABORT, staged)
    future = time.time() + 86_400  # written on a machine whose clock is a day ahead
    os.utime(staged / "host.log", (future, future))
    staged.rename(tree / ABORT.name)
    wait_for(lambda: len(events(ev)) == 1, timeout=10, what="the log-only run, within the idle timeout and a rescan")
    (got,) = events(ev)
    assert got["path"] is None and got["labels"]["run"] == ABORT.name
    assert [f["rule"] for f in got["findings"]] == ["failed"]
    assert a.stop()[0] == 0
