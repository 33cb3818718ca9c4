"""A run's identity is its content: a real ``ringtrace watch`` process over trees whose files are touched
(mtime to the future, the past, now), renamed (their directory, while the agent runs and while it is
down), reached through two roots, rewritten with new bytes, or hold more records than ``total``.  Each
run is reported once; a new content is a new version.  Every wait is on a condition (an events line,
a log line), with a deadline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ringtrace.config import Thresholds
from ringtrace.model.records import SinkEvent
from ringtrace.reading.tail.follower import SETTLE, Follower
from ringtrace.reading.tail.tailer import Tailer
from ringtrace.sources.paths import labels_for
from tests._support.agent import Agent, events, put_run
from tests._support.events import finished, one_shot
from tests._support.ports import free_port
from tests._support.samples import NESTED, PAGED, SMALL, beyond_total
from tests._support.writer import Writer, wait_for


class Roots(Agent):
    """:class:`Agent` over several roots (given first, as ``watch`` takes them)."""

    def __init__(self, roots: list[Path], ev: Path, *extra: str) -> None:
        self.ev = ev
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "ringtrace", "watch", *map(str, roots), "--events",
                                      str(ev), "--log-level", "info", "--metrics-addr", f"127.0.0.1:{self.port}",
                                      "--rescan-interval", "0.5", *extra],
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self.lines = []
        self._t = threading.Thread(target=self._collect, daemon=True)
        self._t.start()


def keys(ev: Path) -> Counter[str]:
    return Counter(str(e["run_key"]) for e in events(ev))


def said(a: Agent, text: str) -> int:
    return a.stderr().count(text)


def same_size_other_bytes(data: bytes) -> bytes:
    """Another content of exactly the same size (a site's line number changed in one record)."""
    at = data.index(b"orch.cpp:4", data.index(b"\n"))
    digit = data[at + 9:at + 10]
    out = data[:at + 9] + (b"5" if digit != b"5" else b"6") + data[at + 10:]
    assert len(out) == len(data) and out != data
    return out


def test_an_mtime_change_is_the_same_run_and_new_bytes_a_new_version(tmp_path: Path, agents: list[Agent],
                                                                    writer: Writer) -> None:
    root = tmp_path / "tree"
    files = [put_run(root, f"run{i}", src) for i, src in enumerate((NESTED, PAGED, SMALL))]
    ev, state = tmp_path / "ev.jsonl", tmp_path / "state"
    a = Agent(str(root), ev, "--state-dir", str(state), "--rescan-interval", "0.2")
    agents.append(a)
    wait_for(lambda: len(events(ev)) == 3, what="the three runs")
    same = "modified (mtime) with the same content: the same run"
    checked = 0
    now = time.time()
    for when in (now + 86_400 * 365, now - 86_400 * 365, None):  # the future, the past, now (touch)
        for p in files:
            if when is None:
                subprocess.run(["touch", str(p)], check=True)
            else:
                os.utime(p, (when, when))
        checked += len(files)
        wait_for(lambda n=checked: said(a, same) >= n, what=f"{checked} files checked")  # type: ignore[misc]
        assert len(events(ev)) == 3
    # a real rewrite of the same size (in place, like a re-run): a new version, reported once
    writer.write_file(files[0], same_size_other_bytes(NESTED.read_bytes()))
    wait_for(lambda: len(events(ev)) == 4, what="the rewritten run")
    # and one of another size
    writer.write_file(files[2], NESTED.read_bytes())
    wait_for(lambda: len(events(ev)) == 5, what="the second rewrite")
    code, _ = a.stop()
    assert code == 0
    # touched while the agent was down: the restart checks them and reports nothing
    for p in files:
        os.utime(p, (now - 1000, now - 1000))
    b = Agent(str(root), ev, "--state-dir", str(state), "--rescan-interval", "0.2")
    agents.append(b)
    wait_for(lambda: said(b, same) >= 3, what="the restart's checks")
    put_run(root, "probe", SMALL)
    wait_for(lambda: len(events(ev)) == 6, what="the probe run")
    code, _ = b.stop()
    assert code == 0
    got = events(ev)
    assert [e["labels"]["run"] for e in got] == ["run0", "run1", "run2", "run0", "run2", "probe"]
    assert max(keys(ev).values()) == 1
    assert got[3]["records"] == got[0]["records"] and got[3]["run_key"] != got[0]["run_key"]


def test_a_renamed_directory_is_the_same_run(tmp_path: Path, agents: list[Agent]) -> None:
    root = tmp_path / "tree"
    put_run(root, "run_a", NESTED)
    put_run(root, "run_c", PAGED)
    ev, state = tmp_path / "ev.jsonl", tmp_path / "state"
    a = Agent(str(root), ev, "--state-dir", str(state), "--rescan-interval", "0.2")
    agents.append(a)
    wait_for(lambda: len(events(ev)) == 2, what="the two runs")
    (root / "run_a").rename(root / "run_b")  # while the agent runs
    wait_for(lambda: "moved to" in a.stderr() or "reached by another path" in a.stderr(),
             what="the move to be seen")
    put_run(root, "probe1", SMALL)
    wait_for(lambda: len(events(ev)) == 3, what="the first probe")
    code, _ = a.stop()
    assert code == 0
    (root / "run_c").rename(root / "run_d")  # while it is down
    b = Agent(str(root), ev, "--state-dir", str(state), "--rescan-interval", "0.2")
    agents.append(b)
    wait_for(lambda: "reached by another path" in b.stderr(), what="the renamed run to be recognised")
    put_run(root, "probe2", SMALL)
    wait_for(lambda: len(events(ev)) == 4, what="the second probe")
    code, _ = b.stop()
    assert code == 0
    assert [e["labels"]["run"] for e in events(ev)] == ["run_a", "run_c", "probe1", "probe2"]


def test_a_tree_given_twice_through_a_symlink_is_one_run_each(tmp_path: Path, agents: list[Agent],
                                                            writer: Writer) -> None:
    root = tmp_path / "tree"
    for i, src in enumerate((NESTED, PAGED, SMALL)):
        put_run(root, f"run{i}", src)
    link = tmp_path / "link"
    link.symlink_to(root)
    ev = tmp_path / "once.jsonl"
    once = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(root), str(link), "--once",
                           "--events", str(ev)], capture_output=True, text=True, timeout=120)
    assert once.returncode == 0, once.stderr
    assert sorted(e["labels"]["run"] for e in events(ev)) == ["run0", "run1", "run2"]
    # the service, with a file written while both roots see it, in pieces
    ev2 = tmp_path / "ev.jsonl"
    a = Roots([root, link], ev2, "--rescan-interval", "0.2")
    agents.append(a)
    wait_for(lambda: len(events(ev2)) == 3, what="the three runs")
    live = root / "live" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=live.parent)
    data = PAGED.read_bytes()
    writer.write_file(live, data, [100, 50_000, 200_000])
    wait_for(lambda: len(events(ev2)) == 4, what="the live run")
    put_run(root, "probe", SMALL)  # anything the second root would add comes before this
    wait_for(lambda: len(events(ev2)) == 5, what="the probe")
    code, _ = a.stop()
    assert code == 0
    assert sorted(e["labels"]["run"] for e in events(ev2)) == ["live", "probe", "run0", "run1", "run2"]


def promised_written(tmp_path: Path, writer: Writer, extra: int) -> tuple[Follower, bytes, int]:
    """A follower of a file the writer process has written up to its promised records (``extra`` more
    to come, the file left open): the follower, the whole file's bytes and where the promised ones end."""
    path = tmp_path / "run" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=path.parent)
    data, cut = beyond_total(extra)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:cut])
    return Follower(path, labels_for(path), Thresholds(), settle=SETTLE), data, cut


def test_records_beyond_total_are_one_run_marked_as_summary_marks_it(tmp_path: Path, writer: Writer) -> None:
    """The writer stops exactly after the promised records; the follower has read them all, and the
    rest arrives later: one run, with every record, as ``summary`` reports the whole file."""
    f, data, cut = promised_written(tmp_path, writer, 40)
    got = f.poll(1.0, 0.0)  # the file's mtime is after this wall clock: it may still be written
    assert finished(got) == [] and f.active and f.complete
    assert f.poll(1.0 + SETTLE / 2, 0.0) == []  # not quiet long enough yet
    writer.do("write", data=data[cut:])
    writer.do("close")
    got = f.poll(2.0, 0.0)
    assert finished(got) == []
    got = f.poll(2.0 + SETTLE, 0.0)  # quiet for ``settle``: finished
    fins = finished(got)
    assert len(fins) == 1
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(data)
    expected = one_shot(whole)
    assert fins[0].reason == "complete"
    assert fins[0].summary.records == expected.summary.records == 1362
    assert fins[0].summary.complete is expected.summary.complete is False
    assert [x.rule for x in fins[0].findings] == [x.rule for x in expected.findings]
    assert "cut_short" not in {x.rule for x in fins[0].findings}  # more than promised is not cut
    assert f.poll(9.0, 0.0) == []


def test_a_complete_run_waits_only_while_its_file_is_fresh(tmp_path: Path) -> None:
    """A file last modified ``settle`` seconds ago or more is finished at once; a fresh one at the tailer's
    tick, once quiet; ``--once`` (settle 0) at once."""
    root = tmp_path / "tree"
    old = put_run(root, "old", SMALL)
    os.utime(old, (time.time() - 60, time.time() - 60))
    put_run(root, "fresh", SMALL)
    tailer = Tailer([str(root)], Thresholds(), idle_timeout=30.0, settle=SETTLE)
    wall = os.stat(root / "fresh" / "scope_stats" / "scope_stats.jsonl").st_mtime  # "now" for the fresh file
    assert tailer.discover(0.0, wall) == []
    out: list[SinkEvent] = []
    while (due := tailer.next_due()) is not None:
        out += due[0].poll(0.0, wall)
    assert [x.source.labels.run for x in finished(out)] == ["old"]
    assert finished(tailer.tick(SETTLE / 2)) == []
    fins = finished(tailer.tick(SETTLE))
    assert [(x.source.labels.run, x.reason) for x in fins] == [("fresh", "complete")]
    at_once = Tailer([str(root)], Thresholds(), idle_timeout=30.0, settle=0.0)
    at_once.discover(0.0, wall)
    out = []
    while (due := at_once.next_due()) is not None:
        out += due[0].poll(0.0, wall)
    assert sorted(x.source.labels.run for x in finished(out)) == ["fresh", "old"]


def test_more_records_than_total_in_a_file_written_whole(tmp_path: Path, agents: list[Agent]) -> None:
    """The agent and ``summary`` agree on such a file (one run, every record, ``incomplete``)."""
    root = tmp_path / "tree"
    src = tmp_path / "src.jsonl"
    src.write_bytes(beyond_total(40)[0])
    put_run(root, "beyond", src)
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, "--rescan-interval", "0.2")
    agents.append(a)
    wait_for(lambda: len(events(ev)) == 1, what="the run")
    put_run(root, "probe", SMALL)
    wait_for(lambda: len(events(ev)) == 2, what="the probe")
    code, _ = a.stop()
    assert code == 0
    summary = subprocess.run([sys.executable, "-m", "ringtrace", "summary", "--format", "json",
                              str(root / "beyond")], capture_output=True, text=True, timeout=60)
    want: dict[str, Any] = json.loads(summary.stdout)["files"][0]
    got = events(ev)[0]
    for field in ("records", "complete", "scopes", "total"):
        assert got[field] == want[field], field
    assert [x["rule"] for x in got["findings"]] == [x["rule"] for x in want["findings"]]


def test_identical_bytes_in_a_new_directory_are_a_new_run(tmp_path: Path, agents: list[Agent]) -> None:
    """Inode numbers are used again after a delete: a new run directory with the same bytes as a deleted
    one is another run (its path is in the key)."""
    root = tmp_path / "tree"
    root.mkdir()
    ev = tmp_path / "ev.jsonl"
    a = Agent(str(root), ev, "--rescan-interval", "0.2")
    agents.append(a)
    wait_for(a.ready, what="the agent")
    for rnd in range(3):
        paths = [put_run(root, f"r{rnd}_{i}", SMALL) for i in range(20)]
        wait_for(lambda n=rnd: len(events(ev)) == 20 * (n + 1), what=f"round {rnd}")  # type: ignore[misc]
        for p in paths:
            shutil.rmtree(p.parent.parent)
        wait_for(lambda: a.metric("ringtrace_files_watched") == 0, what="the deleted files forgotten")
    code, _ = a.stop()
    assert code == 0
    assert max(keys(ev).values()) == 1 and len(keys(ev)) == 60


def test_records_after_the_finish_are_the_same_run_read_again(tmp_path: Path, writer: Writer) -> None:
    """The file gets more records after its run finished, its first bytes unchanged: the follower reads it
    again as the same run (source, generation, run key and content key), not as a new version."""
    f, data, cut = promised_written(tmp_path, writer, 681)
    [first] = finished(f.poll(1.0, time.time() + 60))  # written a minute ago: finished at once
    assert (first.reason, first.summary.records) == ("complete", 681) and first.key and first.content_key
    writer.do("write", data=data[cut:])
    writer.do("close")
    again = f.poll(2.0, time.time() + 60)
    [second] = finished(again)
    assert {e.source for e in again} == {first.source}  # the same run, read from its start
    assert (second.key, second.content_key) == (first.key, first.content_key)
    assert (second.summary.records, second.summary.complete) == (1362, False)  # as summary reads the file
    assert f.inodes.appended == 1 and f.generation == first.source.generation + 1
    assert f.poll(3.0, time.time() + 60) == []


def test_a_run_that_gets_more_records_after_its_finish_is_reported_once(tmp_path: Path, agents: list[Agent],
                                                                      writer: Writer) -> None:
    """Two writes a while apart, the first with every promised record, the second with as many more: the
    agent reports the run once on --events (at its first finish), and updates what can be updated (its
    series on /metrics, its one Perfetto trace); the late records are counted."""
    root = tmp_path / "tree"
    root.mkdir()
    ev, traces = tmp_path / "ev.jsonl", tmp_path / "traces"
    a = Agent(str(root), ev, "--perfetto-dir", str(traces))
    agents.append(a)
    wait_for(a.ready, what="the agent")
    path = root / "beyond" / "scope_stats" / "scope_stats.jsonl"
    writer.do("mkdir", path=path.parent)
    data, cut = beyond_total(681)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:cut])
    wait_for(lambda: len(events(ev)) == 1, what="the run finished with its promised records")
    writer.do("write", data=data[cut:])
    writer.do("close")
    wait_for(lambda: a.metric('ringtrace_runs_finished_total{reason="complete"}') == 2
             and a.metric("ringtrace_run_records") == 1362, what="the run read again, its series updated")
    appended = a.metric("ringtrace_runs_appended_after_finish_total")
    code, _ = a.stop()
    assert code == 0
    [line] = events(ev)
    assert (line["reason"], line["records"], line["labels"]["run"]) == ("complete", 681, "beyond")
    assert appended == 1 and "byte(s) appended after its run finished" in a.stderr()
    assert len(list(traces.iterdir())) == 1  # one trace, rewritten with every record


@pytest.mark.slow  # four watch processes
def test_a_run_renamed_after_a_finish_its_state_missed_is_reported_once(tmp_path: Path, writer: Writer) -> None:
    """The agent wrote a run's line, but its state missed the finish (a kill -9 in the 0.2 s before the
    save); the run directory is renamed while the agent is down.  The restart reads the run under its new
    name: the events file knows it by its content key and does not write it again."""
    root, state, ev = tmp_path / "tree", tmp_path / "state", tmp_path / "ev.jsonl"
    once = [sys.executable, "-m", "ringtrace", "watch", str(root), "--once", "--events", str(ev),
            "--state-dir", str(state)]
    put_run(root, "probe", SMALL)
    subprocess.run(once, check=True, capture_output=True, timeout=120)
    before = (state / "ringtrace-state.json").read_bytes()  # the state without the next run
    d = root / "run_a" / "scope_stats"
    writer.do("mkdir", path=d)
    writer.do("copy", src=NESTED, dst=d / "scope_stats.jsonl")
    subprocess.run(once, check=True, capture_output=True, timeout=120)
    assert [e["labels"]["run"] for e in events(ev)] == ["probe", "run_a"]
    (state / "ringtrace-state.json").write_bytes(before)  # the save that would have remembered run_a was lost
    writer.do("rename", src=root / "run_a", dst=root / "run_b")
    done = subprocess.run(once, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [e["labels"]["run"] for e in events(ev)] == ["probe", "run_a"]  # not again as run_b
    # without any state at all, the same
    shutil.rmtree(state)
    subprocess.run(once, check=True, capture_output=True, timeout=120)
    assert [e["labels"]["run"] for e in events(ev)] == ["probe", "run_a"]
