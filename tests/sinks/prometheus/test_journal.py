"""Finished runs' series across restarts (``--state-dir``): a new sink on the same directory serves the
finished runs the last one held, byte for byte, for the rest of their TTL; a run finished again after a kill
keeps its first finish; a line cut by a kill is skipped with one warning."""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from ringtrace.model.records import Labels, RunFinished, Source
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sinks.prometheus._journal import JOURNAL
from ringtrace.stages.run import Run
from tests._support.prometheus import Clock, events_of, one, pick, same_as_fresh, series
from tests._support.samples import FLOW, PAGED


def feed_run(sink: PrometheusSink, name: str, data: bytes, key: str = "", finish: bool = True) -> None:
    src = Source(f"/t/{name}/scope_stats/scope_stats.jsonl", Labels(run=name))
    if not finish:
        for ev in Run(src).feed(data):
            sink.receive(ev)
        return
    for ev in events_of(data, src, 1 << 20):
        sink.receive(msgspec.structs.replace(ev, key=key or name) if isinstance(ev, RunFinished) else ev)


def runs_of(text: bytes) -> set[str]:
    return {line.split(b'run="')[1].split(b'"')[0].decode() for line in text.splitlines() if b'run="' in line}


def test_a_restarted_sink_serves_the_finished_runs_for_the_rest_of_their_ttl(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    first = PrometheusSink(clock=clock, series_ttl=100.0, state_dir=tmp_path)
    feed_run(first, "wedged", FLOW.read_bytes())
    clock.now = 1050.0
    feed_run(first, "healthy", PAGED.read_bytes())
    feed_run(first, "open", PAGED.read_bytes()[:20_000], finish=False)  # read again from its file after a restart
    before = same_as_fresh(first)
    first.close()  # or killed: every line is written when its run finishes
    clock.now = 1060.0
    again = PrometheusSink(clock=clock, series_ttl=100.0, state_dir=tmp_path)
    after = same_as_fresh(again)
    assert runs_of(after) == {"wedged", "healthy"}
    finished_lines = [line for line in before.splitlines() if b'run="open"' not in line and b'run="' in line]
    assert finished_lines == [line for line in after.splitlines() if b'run="' in line]  # the same series, same values
    s = series(again)
    assert one(s, "ringtrace_run_verdict", run="wedged", kind="wedged") == 1
    assert one(s, "ringtrace_runs_tracked") == 2
    clock.now = 1100.0  # the TTL goes on from the first finish: 1000 + 100
    assert runs_of(same_as_fresh(again)) == {"healthy"}
    clock.now = 1150.0
    assert not runs_of(same_as_fresh(again))
    assert not PrometheusSink(clock=clock, series_ttl=100.0, state_dir=tmp_path)._runs  # nothing left to restore


def test_a_run_finished_again_after_a_kill_keeps_its_first_finish(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    first = PrometheusSink(clock=clock, series_ttl=100.0, state_dir=tmp_path)
    feed_run(first, "r", FLOW.read_bytes(), key="k1")
    feed_run(first, "other", FLOW.read_bytes(), key="k2")
    clock.now = 1090.0
    again = PrometheusSink(clock=clock, series_ttl=100.0, state_dir=tmp_path)
    feed_run(again, "r", FLOW.read_bytes(), key="k1")  # the reader's state was not saved yet: read again
    feed_run(again, "other", PAGED.read_bytes(), key="k3")  # its file changed meanwhile: a new run
    s = series(again)
    assert one(s, "ringtrace_run_verdict", run="r", kind="wedged") == 1
    assert one(s, "ringtrace_run_verdict", run="other", kind="healthy") == 1
    clock.now = 1100.0
    assert runs_of(same_as_fresh(again)) == {"other"}  # r expired at its first finish + TTL


def test_a_line_cut_by_a_kill_is_skipped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock(1000.0)
    first = PrometheusSink(clock=clock, state_dir=tmp_path)
    feed_run(first, "a", FLOW.read_bytes())
    feed_run(first, "b", PAGED.read_bytes())
    journal = tmp_path / JOURNAL
    data = journal.read_bytes()
    journal.write_bytes(data[: len(data) - 40])  # the kill landed in the middle of b's line
    with caplog.at_level(logging.WARNING, logger="ringtrace.sinks.prometheus"):
        again = PrometheusSink(clock=clock, state_dir=tmp_path)
    assert runs_of(same_as_fresh(again)) == {"a"}
    assert [r.message for r in caplog.records if "could not be read" in r.message] and len(caplog.records) == 1
    assert journal.read_bytes().count(b"\n") == 1  # written again with the runs it holds


def test_the_journal_is_written_again_when_it_holds_twice_the_runs(tmp_path: Path) -> None:
    clock = Clock(0.0)
    sink = PrometheusSink(clock=clock, series_ttl=10.0, state_dir=tmp_path)
    evs = events_of(PAGED.read_bytes(), Source("/t/r/scope_stats/scope_stats.jsonl"), 1 << 20)
    for i in range(1100):
        clock.now = float(i)
        src = Source(f"/t/r{i}/scope_stats/scope_stats.jsonl", Labels(run=f"r{i}"))
        for ev in evs:
            sink.receive(msgspec.structs.replace(ev, source=src))
    held = len(pick(series(sink), "ringtrace_run_verdict"))
    assert held == 10
    lines = (tmp_path / JOURNAL).read_bytes().count(b"\n")
    assert lines <= 2 * held + 1000
    assert runs_of(same_as_fresh(PrometheusSink(clock=clock, series_ttl=10.0, state_dir=tmp_path))) == \
        {f"r{i}" for i in range(1090, 1100)}
