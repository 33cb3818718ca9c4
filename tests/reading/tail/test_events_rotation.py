"""Rotating the events file by rename while runs keep coming: a real ``ringtrace watch`` process writes each
line to the file at the path (a new one after each rename), none is lost and none is written twice across
the files; a run that appeared after a rename is never in a file renamed before it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests._support.agent import Agent, put_run
from tests._support.writer import wait_for


def runs_in(path: Path) -> list[str]:
    if not path.exists():
        return []
    data = path.read_bytes()
    *whole, _tail = data.split(b"\n")
    return [str(json.loads(x)["labels"]["run"]) for x in whole]


def test_rename_rotation_while_runs_keep_coming(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    root.mkdir()
    ev = tmp_path / "events.jsonl"
    a = Agent(str(root), ev, "--rescan-interval", "0.5")
    agents.append(a)
    wait_for(a.ready, what="the agent")
    files = [ev]  # files[k]: where the lines went in epoch k (the last is the path itself)
    epoch_of: dict[str, int] = {}  # run -> the epoch it was created in
    total, rotations = 40, (12, 27)

    def seen() -> int:
        return sum(len(runs_in(f)) for f in files)

    for i in range(total):
        if i in rotations:  # some lines are in the file, a few runs may still be on their way
            wait_for(lambda n=i: seen() >= n - 4, what=f"{i - 4} lines")  # type: ignore[misc]
            rotated = tmp_path / f"events.jsonl.{len(files)}"
            ev.rename(rotated)  # logrotate without copytruncate
            files[-1] = rotated
            files.append(ev)
        name = f"run{i:03d}"
        epoch_of[name] = len(files) - 1
        put_run(root, name)  # runs keep coming: the next is written before this one's line is waited for
    wait_for(lambda: seen() == total, what="every run's line")
    code, _ = a.stop()
    assert code == 0
    assert len(files) == 3, "both rotations happened"
    where = {run: k for k, f in enumerate(files) for run in runs_in(f)}
    assert Counter(r for f in files for r in runs_in(f)) == Counter(epoch_of.keys())  # each run once, none lost
    assert all(where[run] >= epoch for run, epoch in epoch_of.items())  # never in a file renamed before it was made
    assert all(runs_in(f) for f in files)  # every file got lines: the new file at the path was written
    assert a.stderr().count("the events file was renamed away or deleted; writing to a new file at the path") == 2
