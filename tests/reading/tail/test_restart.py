"""Exactly once across crashes: ``ringtrace watch --state-dir`` killed (SIGKILL or SIGTERM) at random
points over a tree and restarted emits every run of the tree exactly once, with its figures.

Kill points are chosen by a seeded generator as "after the k-th line of the events file appeared"
(a condition, not a time): the kill lands anywhere between a sink taking a run and the state
that remembers it.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests._support.samples import SAMPLES

pytestmark = pytest.mark.slow  # each test runs watch processes

FILES = [SAMPLES / "outputs/NestedScopes_small_20261130_101702/scope_stats/scope_stats.jsonl",
         SAMPLES / "outputs/TestBenchmarkBgemm_Case0_20261130_101845/scope_stats/scope_stats.jsonl",
         SAMPLES / "outputs/TestPagedAttention_big16x2048_tight_20261130_101530/scope_stats/scope_stats.jsonl"]


def lines(ev: Path) -> list[dict[str, Any]]:
    """The newline-terminated lines of ``ev``, each parsed (a line that is not JSON fails the test).

    A last line without a newline is being written, or was torn by a kill: it is not counted
    (the next watcher cuts it back).  Every line before it must be whole JSON: a torn line that a
    later line was appended to would not parse.
    """
    if not ev.exists():
        return []
    *whole, _tail = ev.read_bytes().split(b"\n")
    return [json.loads(x) for x in whole]


def one_shot(tree: Path) -> Counter[tuple[str, int, int]]:
    """(run, records, scopes) of every run, from ``watch --once`` without state."""
    ev = tree.parent / "reference.jsonl"
    subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev)],
                   check=True, capture_output=True, timeout=120)
    return Counter((str(e["labels"]["run"]), int(e["records"]), int(e["scopes"]))
                   for e in lines(ev))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_kills_at_random_points_emit_each_run_once(tmp_path: Path, seed: int) -> None:
    """The tree grows by a batch of runs before each start, so every round has work left however
    fast the agent is (an agent that caught up on the whole tree before its first kill made one
    round, seen in CI); the kill lands once the events file reached a seeded point of the batch."""
    rng = random.Random(seed)
    tree = tmp_path / "tree"
    batches = [9, 12, 8, 11, 5]
    n = sum(batches)
    state, ev = tmp_path / "state", tmp_path / "events.jsonl"
    alive_at_kill: list[bool] = []
    added = 0
    for size in batches:
        for i in range(added, added + size):
            d = tree / f"run{i:03d}" / "scope_stats"
            d.mkdir(parents=True)
            shutil.copy(FILES[i % len(FILES)], d / "scope_stats.jsonl")
        added += size
        have = len(lines(ev))
        proc = subprocess.Popen([sys.executable, "-m", "ringtrace", "watch", str(tree), "--state-dir", str(state),
                                 "--events", str(ev), "--idle-timeout", "600"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        target = min(added, have + rng.randint(1, size))
        deadline = time.monotonic() + 60
        while len(lines(ev)) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)  # polling the file for the kill point; the kill lands wherever the agent is
        alive_at_kill.append(proc.poll() is None)
        proc.send_signal(signal.SIGKILL if rng.random() < 0.75 else signal.SIGTERM)
        proc.wait(timeout=30)
    expected = one_shot(tree)
    assert sum(expected.values()) == n
    # a last, undisturbed pass (--once: the same code path) finishes what is left and repeats nothing
    done = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--state-dir", str(state),
                           "--events", str(ev), "--once"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = Counter((str(e["labels"]["run"]), int(e["records"]), int(e["scopes"]))
                  for e in lines(ev))
    assert alive_at_kill == [True] * len(batches)  # every kill hit a running agent
    assert ev.read_bytes().endswith(b"\n")  # the last pass left no torn tail (it cuts one at its start)
    assert got == expected  # each run exactly once, with the figures of a one-shot read
    assert {e["reason"] for e in lines(ev)} == {"complete"}
    assert len({e["run_key"] for e in lines(ev)}) == n  # and by run key


def test_a_line_torn_by_a_kill_is_cut_and_its_run_written_whole(tmp_path: Path) -> None:
    """The state a SIGKILL during the ``os.write`` of a line over a page leaves, made exactly: the
    events file holds a whole line, then the first bytes of the next one up to a page boundary (the
    kernel stops a write at a fatal signal between pages) and no state.  A real restart cuts the
    torn bytes, writes that run whole and repeats nothing."""
    tree = tmp_path / "tree"
    for i, src in enumerate(FILES):
        d = tree / f"run{i}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(src, d / "scope_stats.jsonl")
    expected = one_shot(tree)
    reference = (tree.parent / "reference.jsonl").read_bytes().splitlines(keepends=True)
    assert len(reference) == len(FILES)
    whole = min(reference, key=len)
    torn = max(reference, key=len)
    page = 4096
    cut = -(-(len(whole) + page + 1) // page) * page  # the first page boundary past a page of the torn line
    assert len(whole) + page < cut < len(whole) + len(torn)
    ev = tmp_path / "events.jsonl"
    ev.write_bytes(whole + torn[:cut - len(whole)])
    done = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--state-dir",
                           str(tmp_path / "state"), "--events", str(ev)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{ev}: cut {cut - len(whole)} bytes of a torn last line" in done.stderr
    data = ev.read_bytes()
    assert data.startswith(whole) and data.endswith(b"\n") and data.count(torn) == 1
    got = Counter((str(e["labels"]["run"]), int(e["records"]), int(e["scopes"]))
                  for e in lines(ev))
    assert got == expected and len(data.splitlines()) == len(FILES)  # each run once, every line JSON


@pytest.mark.parametrize("loss", ["torn", "truncated"])
def test_runs_whose_lines_the_events_file_lost_are_written_again(tmp_path: Path, loss: str) -> None:
    """A power cut after the key index reached the disk but before the events file's tail did (or a restore
    of an older events file): the index holds keys whose lines are gone.  The restart (without state: every
    run is read again) drops those keys at open and writes their runs again, once; the others not."""
    tree = tmp_path / "tree"
    for i in range(6):
        d = tree / f"run{i}" / "scope_stats"
        d.mkdir(parents=True)
        shutil.copy(FILES[i % len(FILES)], d / "scope_stats.jsonl")
    expected = one_shot(tree)
    ev = tmp_path / "events.jsonl"
    argv = [sys.executable, "-m", "ringtrace", "watch", str(tree), "--once", "--events", str(ev)]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    data = ev.read_bytes()
    whole = data.splitlines(keepends=True)
    assert len(whole) == 6 and len(Path(f"{ev}.keys").read_bytes().splitlines()) == 12  # two keys a run
    kept = len(b"".join(whole[:3]))
    ev.write_bytes(data[:kept + (len(whole[3]) // 2 if loss == "torn" else 0)])  # 3 lines (and a half) lost
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "6 run key(s) dropped: their lines ended past the end of the events file" in done.stderr
    got = lines(ev)
    assert ev.read_bytes().startswith(b"".join(whole[:3])) and len(got) == 6
    assert Counter((str(e["labels"]["run"]), int(e["records"]), int(e["scopes"])) for e in got) == expected
