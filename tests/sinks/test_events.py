"""The events sink writes whole lines or nothing, also on a full disk (a real, small tmpfs), cuts a torn
last line (a writer killed mid-line) back at open, remembers every run it wrote in its key index (never
only the file's last MiB), and follows a rotation by rename."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ringtrace.model.records import Labels, RunFinished, SinkEvent, Source, utf8
from ringtrace.sinks import FanOut
from ringtrace.sinks.events import INDEX_SUFFIX, EventsSink, run_keys, scan_run_keys
from ringtrace.sinks.summary import file_object
from tests._support.events import read_events, run_events
from tests._support.samples import FAILED, L3
from tests._support.scope_stats import rec, with_totals
from tests._support.tmpfs import fill, small_tmpfs

OLD = b'{"old": "a whole line from before"}\n'


@pytest.fixture(scope="module")
def runs() -> list[SinkEvent]:
    events = read_events([L3, FAILED])
    assert sum(isinstance(e, RunFinished) for e in events) == 4
    return events


def _lines(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"a torn last line: {data[-80:]!r}"
    return [json.loads(line) for line in data.splitlines()]


@pytest.mark.parametrize("opener", ["sink", "ab"])
def test_one_whole_line_per_finished_run(tmp_path: Path, runs: list[SinkEvent], opener: str) -> None:
    path = tmp_path / "events.jsonl"
    path.write_bytes(OLD)
    sink = EventsSink.open(str(path)) if opener == "sink" else EventsSink(open(path, "ab"), owns=True)  # noqa: SIM115
    fanout = FanOut([sink])
    fanout.receive_all(runs)
    fanout.close()
    lines = _lines(path)
    assert fanout.errors["events"] == 0
    finished = [e for e in runs if isinstance(e, RunFinished)]
    assert lines[0] == {"old": "a whole line from before"}
    assert [(x["path"], x["reason"]) for x in lines[1:]] == [(f.source.path, f.reason) for f in finished]


@pytest.mark.parametrize("opener", ["sink", "ab"])
def test_full_disk_keeps_only_whole_lines_and_counts_every_lost_line(tmp_path: Path, runs: list[SinkEvent],
                                                                     opener: str) -> None:
    finished = [e for e in runs if isinstance(e, RunFinished)]
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        path = mnt / "events.jsonl"
        path.write_bytes(OLD)  # the file's page has ~4 KB of room left, then the disk is full
        filler = fill(mnt, free=0)
        sink = EventsSink.open(str(path)) if opener == "sink" else EventsSink(open(path, "ab"), owns=True)  # noqa: SIM115
        fanout = FanOut([sink])
        fanout.receive_all(runs)  # lines of 2.5 to 8 KB: those that do not fit the page's rest are cut short
        lost = fanout.errors["events"]
        written = _lines(path)[1:]
        assert lost >= 1 and len(written) + lost == len(finished)
        order = iter(f.source.path for f in finished)
        assert all(x["path"] in order for x in written)  # whole lines of some runs, in run order
        filler.unlink()  # room again: the next line is whole, on a line of its own
        fanout.receive(finished[0])
        fanout.close()
        again = _lines(path)
        assert again[0] == {"old": "a whole line from before"} and again[1:-1] == written
        assert again[-1]["path"] == finished[0].source.path and fanout.errors["events"] == lost


def test_a_short_write_is_truncated_back(tmp_path: Path, runs: list[SinkEvent]) -> None:
    """A line that only partly fits (a short write on the file's last page) leaves no trace."""
    big = max((e for e in runs if isinstance(e, RunFinished)), key=lambda e: len(json.dumps(file_object(e))))
    assert len(json.dumps(file_object(big))) > 4096
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        path = mnt / "events.jsonl"
        path.write_bytes(OLD)
        fill(mnt, free=0)
        sink = EventsSink.open(str(path))
        with pytest.raises(OSError) as err:
            sink.receive(big)  # 4.1 KB into the ~4 KB left in the page: cut short
        assert f"after {4096 - len(OLD)} of " in str(err.value)  # it was cut short, then truncated
        assert "the line is dropped, the file is truncated back to its last whole line" in str(err.value)
        assert path.read_bytes() == OLD
        sink.close()


def test_watch_on_a_full_disk_writes_whole_lines_and_reports_the_lost_ones(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for src in (L3, FAILED):
        shutil.copytree(src, tree / src.name)
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        events = mnt / "events.jsonl"
        events.write_bytes(OLD)
        fill(mnt, free=0)
        r = subprocess.run([sys.executable, "-m", "ringtrace", "watch", "--once", str(tree), "--events", str(events)],
                           capture_output=True, text=True, timeout=120, check=False)
        assert r.returncode == 0 and "Traceback" not in r.stderr
        lines = _lines(events)
        lost = r.stderr.count("sink events failed in receive: ")
        # six runs: the two L3 ranks, the two failed runs' files and the two failed runs that left only a host log
        assert lost >= 1 and len(lines) - 1 + lost == 6
        assert f"sink events failed {lost} time(s)" in r.stderr and "No space left on device" in r.stderr


def test_a_path_that_is_not_utf8_is_written(tmp_path: Path, write_jsonl: Any) -> None:
    """The line is written (not lost as a sink error); the path shows U+FFFD for its bad bytes."""
    raw = os.fsencode(tmp_path) + b"/caf\xe9/scope_stats/scope_stats.jsonl"
    path = Path(os.fsdecode(raw))
    path.parent.mkdir(parents=True)
    path.write_bytes(write_jsonl(with_totals([rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 2))])).read_bytes())
    events = run_events(path, Source(str(path), Labels(run=os.fsdecode(b"caf\xe9"))))
    out = tmp_path / "events.jsonl"
    fanout = FanOut([EventsSink.open(str(out))])
    fanout.receive_all(events + runs_of_l3())
    fanout.close()
    lines = _lines(out)
    assert fanout.errors["events"] == 0 and len(lines) == 3
    assert lines[0]["path"] == utf8(str(path)) and "caf\ufffd/" in str(lines[0]["path"]) and lines[0]["scopes"] == 1
    # a label that still holds surrogate escapes (the layout gives none) is written as \\udcXX escapes
    assert lines[0]["labels"] == {"run": os.fsdecode(b"caf\xe9"), "rank": "", "dispatch": "", "program": ""}


def runs_of_l3() -> list[SinkEvent]:
    return read_events([L3])


def _keyed(runs: list[SinkEvent]) -> list[RunFinished]:
    """The finished runs of ``runs``, each with a run key (as the watcher gives them)."""
    return [msgspec.structs.replace(e, key=f"{i:04x}beef") for i, e in enumerate(runs) if isinstance(e, RunFinished)]


def _line_of(event: RunFinished, tmp: Path) -> bytes:
    """The exact line the sink writes for ``event`` (newline included)."""
    path = tmp / "one.jsonl"
    sink = EventsSink.open(str(path))
    sink.receive(event)
    sink.close()
    data = path.read_bytes()
    path.unlink()
    return data


def test_a_torn_tail_is_cut_at_open_and_its_run_written_whole(tmp_path: Path, runs: list[SinkEvent],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A kill mid-line left the line's first bytes, up to and including its run key but not its end:
    open cuts them (logged, counted); the run is not taken as written, so it is written whole."""
    first, torn = _keyed(runs)[:2]
    whole, line = _line_of(first, tmp_path), _line_of(torn, tmp_path)
    part = line[:line.index(torn.key.encode()) + len(torn.key) + 1]  # '..."run_key":"<key>"': no '}', no newline
    assert len(part) > 4096 and not part.endswith(b"\n")
    path = tmp_path / "events.jsonl"
    path.write_bytes(OLD + whole + part)
    with caplog.at_level(logging.WARNING, logger="ringtrace.sinks.events"):
        sink = EventsSink.open(str(path))
    assert (sink.torn_lines_cut, sink.torn_bytes_cut) == (1, len(part))
    assert path.read_bytes() == OLD + whole  # only whole lines, every one JSON
    assert [json.loads(x) for x in path.read_bytes().splitlines()][1]["run_key"] == first.key
    assert f"{path}: cut {len(part)} bytes of a torn last line" in caplog.text
    fanout = FanOut([sink])
    fanout.receive_all([torn, first])  # the torn run is written whole; the whole one is not repeated
    fanout.close()
    assert fanout.errors["events"] == 0
    assert path.read_bytes() == OLD + whole + line
    assert [x.get("run_key") for x in _lines(path)] == [None, first.key, torn.key]


@pytest.mark.parametrize(("content", "kept"), [(b"", b""), (OLD, OLD), (b'{"no newline at all', b""),
                                               (OLD + b'{"a": 1}\n{"b"', OLD + b'{"a": 1}\n'),
                                               (b"x" * 200_000, b""), (OLD + b"y" * 200_000, OLD)])
def test_open_keeps_exactly_the_whole_lines(tmp_path: Path, content: bytes, kept: bytes) -> None:
    """Up to the last newline, also when the torn part spans several read chunks; nothing else is touched."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(content)
    sink = EventsSink.open(str(path))
    sink.close()
    assert path.read_bytes() == kept
    assert (sink.torn_lines_cut, sink.torn_bytes_cut) == (int(kept != content), len(content) - len(kept))


def test_run_keys_come_only_from_whole_readable_lines() -> None:
    good = b'{"path":"a","run_key":"k1"}\n'
    surrogate = json.dumps({"path": os.fsdecode(b"caf\xe9"), "run_key": "k2"}).encode("ascii") + b"\n"
    joined = b'{"path":"torn","run_key":"k3{"path":"next","run_key":"k4"}\n'  # a torn line with one appended
    window = b'ey":"k0"}\n' + good + surrogate + joined + b"[1]\n" + b'{"run_key":5}\n' + b'{"run_key":"k5"'
    assert run_keys(window, at_start=False) == ["k1", "k2"]
    assert run_keys(b'{"run_key":"k0"}\n' + good, at_start=True) == ["k0", "k1"]
    assert run_keys(b'{"run_key":"k0"}\n' + good, at_start=False) == ["k1"]
    assert run_keys(b"", at_start=True) == [] and run_keys(b'{"run_key":"k0"}', at_start=True) == []


def _write_runs(path: Path, events: list[RunFinished], **kw: Any) -> EventsSink:
    sink = EventsSink.open(str(path), **kw)
    for e in events:
        sink.receive(e)
    return sink


def _keys_in(path: Path) -> list[str]:
    return [str(x["run_key"]) for x in _lines(path) if "run_key" in x]


def _many(runs: list[SinkEvent], n: int) -> list[RunFinished]:
    """``n`` finished runs with distinct keys (copies of the fixture's)."""
    fins = [e for e in runs if isinstance(e, RunFinished)]
    return [msgspec.structs.replace(fins[i % len(fins)], key=f"{i:06d}cafe") for i in range(n)]


@pytest.mark.parametrize("index", ["kept", "lost", "damaged"])
def test_a_run_written_long_ago_is_never_written_again(tmp_path: Path, runs: list[SinkEvent], index: str) -> None:
    """Far more than the old 1 MiB window behind the end; with the key index, without it (the whole file is
    read), and with a damaged index (not trusted: the whole file is read)."""
    path = tmp_path / "events.jsonl"
    many = _many(runs, 400)
    _write_runs(path, many).close()
    assert path.stat().st_size > 3 << 19 and len(_lines(path)) == 400  # more than 1.5 MiB
    keys = Path(str(path) + INDEX_SUFFIX)
    assert len(keys.read_bytes().splitlines()) == 400
    if index == "lost":
        keys.unlink()
    elif index == "damaged":
        lines = keys.read_bytes().splitlines(keepends=True)
        keys.write_bytes(b"".join(lines[:10]) + b"garbage\n" + b"".join(lines[20:]))  # ten lines lost, one bad
    before = path.read_bytes()
    sink = _write_runs(path, many)  # every one again: none is written
    sink.close()
    assert path.read_bytes() == before
    again = EventsSink.open(str(path))
    again.receive(msgspec.structs.replace(many[0], key="new"))
    again.close()
    assert _keys_in(path) == [e.key for e in many] + ["new"]
    assert all(len(x.split()) == 2 for x in keys.read_bytes().splitlines())  # a damaged index is written again
    assert len(keys.read_bytes().splitlines()) == 401


def test_a_line_whose_key_missed_the_index_is_found(tmp_path: Path, runs: list[SinkEvent]) -> None:
    """A kill between the events line and its index line: the file past the index's end is read at open."""
    path = tmp_path / "events.jsonl"
    many = _many(runs, 5)
    _write_runs(path, many).close()
    keys = Path(str(path) + INDEX_SUFFIX)
    lines = keys.read_bytes().splitlines(keepends=True)
    keys.write_bytes(b"".join(lines[:3]))  # the last two keys never reached the index
    sink = _write_runs(path, many)
    sink.close()
    assert _keys_in(path) == [e.key for e in many]
    assert len(keys.read_bytes().splitlines()) == 5  # and now they are in it


def test_the_index_is_bounded(tmp_path: Path, runs: list[SinkEvent]) -> None:
    path = tmp_path / "events.jsonl"
    many = _many(runs, 40)
    _write_runs(path, many, keys_kept=10).close()
    keys = Path(str(path) + INDEX_SUFFIX)
    assert len(keys.read_bytes().splitlines()) <= 15  # rewritten with the newest 10 at one and a half times that
    sink = _write_runs(path, many[-10:], keys_kept=10)
    assert len(_lines(path)) == 40  # the newest ten are remembered
    sink.receive(many[0])  # the oldest is not any more
    sink.close()
    assert _keys_in(path) == [e.key for e in many] + [many[0].key]


def test_an_index_on_a_full_disk_catches_up(tmp_path: Path, runs: list[SinkEvent],
                                            caplog: pytest.LogCaptureFixture) -> None:
    """The index cannot be appended to (its disk is full) while the events file can: the keys wait in
    memory and go with the next append that works; the next start knows every run."""
    many = _many(runs, 6)
    with small_tmpfs(tmp_path / "mnt", "64k") as mnt:
        path = tmp_path / "events.jsonl"
        real = mnt / "events.keys"
        Path(str(path) + INDEX_SUFFIX).symlink_to(real)
        real.write_bytes(b"")
        filler = fill(mnt, free=0)
        with caplog.at_level(logging.ERROR, logger="ringtrace.sinks.events"):
            sink = _write_runs(path, many[:3])
        assert "cannot append to the events file's key index" in caplog.text
        assert real.read_bytes() == b"" and len(_lines(path)) == 3
        filler.unlink()
        sink.receive(many[3])
        sink.close()
        assert len(real.read_bytes().splitlines()) == 4
        sink = _write_runs(path, many)
        sink.close()
        assert _keys_in(path) == [e.key for e in many]


def test_scan_run_keys_reads_lines_longer_than_its_window(tmp_path: Path) -> None:
    path = tmp_path / "f"
    lines = [json.dumps({"run_key": f"k{i}", "pad": "x" * (i * 400_000)}).encode() + b"\n" for i in range(5)]
    path.write_bytes(b"".join(lines))
    fd = os.open(path, os.O_RDONLY)
    try:
        size = path.stat().st_size
        assert list(scan_run_keys(fd, 0, size)) == ["k0", "k1", "k2", "k3", "k4"]
        second = len(lines[0]) + len(lines[1])
        assert list(scan_run_keys(fd, second, size)) == ["k2", "k3", "k4"]
        assert list(scan_run_keys(fd, second + 1, size)) == ["k3", "k4"]  # inside a line: that line is skipped
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["rename", "delete", "reopen", "copytruncate"])
def test_rotation_lines_go_to_the_file_at_the_path(tmp_path: Path, runs: list[SinkEvent], how: str) -> None:
    path = tmp_path / "events.jsonl"
    many = _many(runs, 6)
    sink = _write_runs(path, many[:3])
    rotated = tmp_path / "events.jsonl.1"
    if how == "copytruncate":
        rotated.write_bytes(path.read_bytes())
        os.truncate(path, 0)
    elif how == "delete":
        rotated.write_bytes(path.read_bytes())
        path.unlink()
    else:
        path.rename(rotated)
    if how == "reopen":
        Path(path).write_bytes(b"")  # logrotate's create, then SIGHUP
        sink.reopen()
    for e in many:  # the first three again: none is written, in either file
        sink.receive(e)
    sink.close()
    assert _keys_in(rotated) == [e.key for e in many[:3]]
    assert _keys_in(path) == [e.key for e in many[3:]]
    assert sink.reopened == (0 if how == "copytruncate" else 1)
    # a restart without state reads every run again: the rotated runs' keys (kept at the end 0, the sink saw
    # the rotation) are not taken for lines the new, shorter file lost
    _write_runs(path, many).close()
    assert _keys_in(path) == [e.key for e in many[3:]]


def test_a_path_that_cannot_be_opened_again_keeps_the_open_file(tmp_path: Path, runs: list[SinkEvent],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "events.jsonl"
    many = _many(runs, 4)
    sink = _write_runs(path, many[:2])
    rotated = tmp_path / "rotated.jsonl"
    path.rename(rotated)
    path.mkdir()  # not a file any more
    with caplog.at_level(logging.ERROR, logger="ringtrace.sinks.events"):
        sink.receive(many[2])
        sink.receive(many[3])
    sink.close()
    assert caplog.text.count("cannot open it again") == 1  # once, not per line
    assert _keys_in(rotated) == [e.key for e in many]  # nothing lost


@pytest.mark.parametrize("loss", ["whole lines", "mid-line", "everything"])
def test_keys_whose_lines_were_lost_are_dropped_at_open(tmp_path: Path, runs: list[SinkEvent], loss: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """The events file lost its tail while the index kept the keys (a power cut after the index reached the
    disk, a restore from a backup): at open every key whose line ends past the file's end is dropped, so
    those runs are written again, once; the runs still in the file are not."""
    path = tmp_path / "events.jsonl"
    many = _many(runs, 8)
    _write_runs(path, many).close()
    data = path.read_bytes()
    ends = [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]
    keep = {"whole lines": 5, "mid-line": 5, "everything": 0}[loss]
    cut = ends[keep - 1] if keep else 0
    path.write_bytes(data[:cut + (100 if loss == "mid-line" else 0)])  # the index still holds all 8 keys
    assert len(Path(str(path) + INDEX_SUFFIX).read_bytes().splitlines()) == 8
    with caplog.at_level(logging.WARNING, logger="ringtrace.sinks.events"):
        sink = _write_runs(path, many)  # every run read again
    sink.close()
    assert _keys_in(path) == [e.key for e in many]  # the lost ones written again, none twice
    assert f"{8 - keep} run key(s) dropped" in caplog.text  # one key a run here (no content key)
    assert len(Path(str(path) + INDEX_SUFFIX).read_bytes().splitlines()) == 8  # rewritten without the stale keys
    again = _write_runs(path, many)  # and the next start knows them all
    again.close()
    assert _keys_in(path) == [e.key for e in many]
