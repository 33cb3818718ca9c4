"""One discovery for every command: ``summary DIR``, ``watch DIR --once`` and ``convert DIR`` read the same
runs of a tree with symbolic links to files and directories in it (links are not followed inside a walk;
a path given on the command line is read even when it is one)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ringtrace.demo import sim


def ringtrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringtrace", *args], capture_output=True, text=True, timeout=120)


def tree(root: Path) -> None:
    for name, seed in (("a_20261201_000000", 1), ("b_20261201_000000", 2)):
        f = root / "outputs" / name / "scope_stats" / "scope_stats.jsonl"
        f.parent.mkdir(parents=True)
        sim.write_file(f, sim.named("tight", seed=seed))
    (root / "outputs" / "linked_dir").symlink_to(root / "outputs" / "a_20261201_000000")
    c = root / "outputs" / "c_20261201_000000" / "scope_stats"
    c.mkdir(parents=True)
    (c / "scope_stats.jsonl").symlink_to(root / "outputs" / "b_20261201_000000" / "scope_stats" / "scope_stats.jsonl")


@pytest.mark.slow  # three commands as processes
def test_summary_watch_and_convert_read_the_same_runs(tmp_path: Path) -> None:
    tree(tmp_path)
    root = str(tmp_path / "outputs")
    summary = ringtrace("summary", "--format", "json", root)
    assert summary.returncode == 0, summary.stderr
    from_summary = sorted(f["labels"]["run"] for f in json.loads(summary.stdout)["files"])
    events = tmp_path / "events.jsonl"
    watch = ringtrace("watch", root, "--once", "--events", str(events))
    assert watch.returncode == 0, watch.stderr
    from_watch = sorted(json.loads(line)["labels"]["run"] for line in events.read_text().splitlines())
    trace = tmp_path / "t.json"
    convert = ringtrace("convert", root, "-o", str(trace), "--format", "chrome-json")
    assert convert.returncode == 0, convert.stderr
    doc = json.loads(trace.read_text())
    from_convert = sorted(e["args"]["name"] for e in doc["traceEvents"]
                          if e["ph"] == "M" and e["name"] == "process_name")
    assert from_summary == from_watch == from_convert == ["a_20261201_000000", "b_20261201_000000"]


def test_a_link_given_on_the_command_line_is_read(tmp_path: Path) -> None:
    tree(tmp_path)
    link = tmp_path / "outputs" / "c_20261201_000000" / "scope_stats" / "scope_stats.jsonl"
    r = ringtrace("summary", "--format", "json", str(link))
    assert r.returncode == 0 and [f["labels"]["run"] for f in json.loads(r.stdout)["files"]] == ["c_20261201_000000"]
