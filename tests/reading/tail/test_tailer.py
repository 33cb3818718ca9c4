"""The Tailer alone, driven the way the app drives it: change notifications and ticks are injected
(``changed(paths)``, ``tick(now)``, ``discover(now, wall)``) and time is an argument, so nothing here
waits on the wall clock (the mtail way: a tailer under test wakers).  The file is written by a real
writer process; the events are compared with what the one-shot reader makes of the same bytes.

The app ticks every 0.5 s; a longer gap between two ticks is time the agent did not run
(``tailer.PAUSE``), so a test that lets time pass ticks through it (:func:`ticks`).
"""

from __future__ import annotations

from pathlib import Path

from ringtrace.config import Thresholds
from ringtrace.model.records import RunProgress, RunStarted, SinkEvent
from ringtrace.reading.tail import state as state_mod
from ringtrace.reading.tail.follower import SETTLE
from ringtrace.reading.tail.tailer import PAUSE, Tailer
from tests._support.events import finished, read_events
from tests._support.samples import NESTED, beyond_total
from tests._support.writer import Writer

IDLE = 30.0
WALL = 1_000_000.0  # the wall clock the tailer is given ("now" for seen_at); never read from the system


def tailer(root: Path, **kw: object) -> Tailer:
    return Tailer([str(root)], Thresholds(), idle_timeout=IDLE, settle=0.0, **kw)  # type: ignore[arg-type]


def drain(t: Tailer, now: float) -> list[SinkEvent]:
    """Look at every queued file, as the reader task does between two notifications."""
    out: list[SinkEvent] = []
    while (due := t.next_due()) is not None:
        out += due[0].poll(now, WALL)
    return out


def ticks(t: Tailer, start: float, end: float, step: float = 0.5) -> list[SinkEvent]:
    """Tick from ``start`` to ``end`` (both included) every ``step`` seconds, as the app does."""
    out: list[SinkEvent] = []
    n = round((end - start) / step)
    for i in range(n + 1):
        out += t.tick(start + i * step)
    return out


def records(events: list[SinkEvent]) -> int:
    return sum(len(e.records) for e in events if isinstance(e, RunProgress))


def run_dir(root: Path, writer: Writer, name: str = "r") -> Path:
    d = root / name / "scope_stats"
    writer.do("mkdir", path=d)
    return d / "scope_stats.jsonl"


def test_a_file_is_read_only_when_a_change_is_notified(tmp_path: Path, writer: Writer) -> None:
    """No polling of its own: bytes written without a notification wait until ``changed`` names the file."""
    data = NESTED.read_bytes()
    half = data.index(b"\n", len(data) // 2) + 1
    path = run_dir(tmp_path, writer)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:half])
    t = tailer(tmp_path)
    assert t.discover(0.0, WALL) == [] and t.watched == 1
    first = drain(t, 0.0)
    assert isinstance(first[0], RunStarted) and finished(first) == []
    writer.do("write", data=data[half:])
    assert t.next_due() is None  # written, but nobody said so: nothing is due
    t.changed([str(path)])
    rest = drain(t, 1.0)
    writer.do("close")
    fins = finished(rest) or finished(t.tick(1.0))
    [want] = finished(read_events([path]))
    assert [f.reason for f in fins] == ["complete"]
    assert records(first) + records(rest) == want.summary.records
    assert fins[0].summary.peaks == want.summary.peaks and fins[0].summary.scopes == want.summary.scopes


def test_a_run_that_stops_changing_finishes_at_the_idle_timeout(tmp_path: Path, writer: Writer) -> None:
    data = NESTED.read_bytes()
    path = run_dir(tmp_path, writer)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:data.index(b"\n", 5000) + 1])
    writer.do("close")
    t = tailer(tmp_path)
    t.discover(0.0, WALL)
    assert finished(drain(t, 0.0)) == []
    assert finished(ticks(t, 0.0, IDLE - 0.5)) == [] and finished(t.tick(IDLE - 0.01)) == []  # still open
    [fin] = finished(t.tick(IDLE))
    assert fin.reason == "idle" and fin.summary.records > 0
    assert ticks(t, IDLE, 2 * IDLE) == []  # finished once


def test_shutdown_finishes_every_open_run_once(tmp_path: Path, writer: Writer) -> None:
    data = NESTED.read_bytes()
    for name in ("a", "b"):
        path = run_dir(tmp_path, writer, name)
        writer.do("open", path=path, mode="w")
        writer.do("write", data=data[:data.index(b"\n", 3000) + 1])
        writer.do("close")
    t = tailer(tmp_path)
    t.discover(0.0, WALL)
    drain(t, 0.0)
    fins = finished(t.finish_all("shutdown"))
    assert sorted(f.source.labels.run for f in fins) == ["a", "b"] and {f.reason for f in fins} == {"shutdown"}
    assert finished(t.finish_all("shutdown")) == []


def test_a_new_directory_notified_once_has_its_files_read(tmp_path: Path, writer: Writer) -> None:
    """inotify names only the new directory: the files created in it before its watch existed are found."""
    t = tailer(tmp_path)
    assert t.discover(0.0, WALL) == [] and t.watched == 0
    path = run_dir(tmp_path, writer, "late")
    writer.do("copy", src=NESTED, dst=path)
    t.changed([str(tmp_path / "late")])
    [fin] = finished(drain(t, 0.0) + t.tick(0.0))
    assert fin.source.labels.run == "late" and fin.reason == "complete"


def test_a_restart_from_the_saved_state_emits_finished_runs_not_again(tmp_path: Path, writer: Writer) -> None:
    tree = tmp_path / "tree"
    path = run_dir(tree, writer)
    writer.do("copy", src=NESTED, dst=path)
    t = tailer(tree)
    t.discover(0.0, WALL)
    assert len(finished(drain(t, 0.0) + t.tick(0.0))) == 1
    store = state_mod.Store(tmp_path / "state")
    assert store.save(t.snapshot())
    again = tailer(tree, saved=state_mod.Store(tmp_path / "state").load())  # a new process reads the file
    out = again.discover(5.0, WALL) + drain(again, 5.0) + again.tick(5.0)
    assert finished(out) == [] and records(out) == 0
    fresh = tailer(tree)  # without the state: the same file is a run again
    assert len(finished(fresh.discover(5.0, WALL) + drain(fresh, 5.0) + fresh.tick(5.0))) == 1


def test_after_a_pause_the_bytes_written_meanwhile_are_read_before_any_run_times_out(tmp_path: Path,
                                                                                    writer: Writer) -> None:
    """The agent slept past the idle timeout (SIGSTOP, a VM pause, a long throttle) while the runtime kept
    writing, and no notification has arrived yet: its first tick reads the file, it does not call the run
    idle with its open scopes wedged (and then report the same run again)."""
    data = NESTED.read_bytes()
    half = data.index(b"\n", len(data) // 2) + 1
    path = run_dir(tmp_path, writer)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:half])
    t = tailer(tmp_path, pause=float("inf"))  # the gap itself is not noticed: only the file says what happened
    t.discover(0.0, WALL)
    assert finished(drain(t, 0.0) + ticks(t, 0.0, 5.0)) == []
    writer.do("write", data=data[half:])  # while the agent sleeps
    writer.do("close")
    assert finished(t.tick(5.0 + 2 * IDLE)) == []  # it wakes long past the timeout: the file moved on
    fins = finished(drain(t, 5.0 + 2 * IDLE) + t.tick(5.0 + 2 * IDLE))
    assert [(f.reason, f.summary.records, f.summary.wedged) for f in fins] == [("complete", 1362, ())]


def test_time_the_agent_did_not_run_is_not_idle_time(tmp_path: Path, writer: Writer) -> None:
    """A VM pause freezes the runtime too: nothing new in the file, but the run did not stop for the
    time the agent was not running, so that time does not count towards its idle timeout."""
    data = NESTED.read_bytes()
    path = run_dir(tmp_path, writer)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:data.index(b"\n", 5000) + 1])
    t = tailer(tmp_path)
    t.discover(0.0, WALL)
    assert finished(drain(t, 0.0) + ticks(t, 0.0, 10.0)) == []
    wake = 10.0 + 3 * IDLE  # no tick for 90 s: the agent did not run
    assert finished(ticks(t, wake, wake + IDLE - 10.5)) == []  # 10 s before the pause + 19.5 s after it < 30 s
    assert t.slept >= 3 * IDLE > PAUSE
    [fin] = finished(ticks(t, wake + IDLE - 10.0, wake + IDLE - 10.0))
    assert fin.reason == "idle"
    writer.do("close")


def test_a_restart_while_a_finished_run_is_read_again_keeps_its_keys(tmp_path: Path, writer: Writer) -> None:
    """More records arrived after the run finished, and the agent stops while it reads the run again: the
    state says whose run that is, so the restart reads it as that run (its keys, which the events file
    knows), not as a new one."""
    tree = tmp_path / "tree"
    path = run_dir(tree, writer)
    data, cut = beyond_total(681)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data[:cut])
    t = Tailer([str(tree)], Thresholds(), idle_timeout=IDLE, settle=SETTLE)
    t.discover(0.0, WALL)
    [first] = finished(drain(t, 0.0) + ticks(t, 0.0, 1.0))  # quiet for ``settle``: complete
    writer.do("write", data=data[cut:])
    writer.do("close")
    t.changed([str(path)])
    assert finished(drain(t, 2.0)) == [] and t.followers[path].active  # read again, waiting to settle
    assert t.inodes.appended == 1
    store = state_mod.Store(tmp_path / "state")
    assert store.save(t.snapshot())
    again = Tailer([str(tree)], Thresholds(), idle_timeout=IDLE, settle=SETTLE, saved=store.load())
    again.discover(5.0, WALL)
    [second] = finished(drain(again, 5.0) + ticks(again, 5.0, 6.0))
    assert (second.key, second.content_key) == (first.key, first.content_key)
    assert (first.summary.records, second.summary.records) == (681, 1362)
