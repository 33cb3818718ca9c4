"""Follower against a real writer process: split writes, rewrites in place, renames, deletes, idle.

The follower is synchronous and clock-free, so each test drives it step by step: the writer
process performs one file operation, answers ``ok``, and the test polls the follower with a
fake monotonic time.  Results are compared with a one-shot read of the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

from ringtrace.config import Thresholds
from ringtrace.demo.sim import generate_bytes
from ringtrace.model.records import WANT_ALL, WANT_SUMMARIES, Problem, RunProgress, RunStarted, SinkEvent, Wants
from ringtrace.reading.tail.follower import SLICE, SUMMARY_SLICE, XXH3, Follower
from ringtrace.sources.paths import labels_for
from tests._support.events import finished, one_shot
from tests._support.samples import NESTED, PAGED, SAMPLES
from tests._support.writer import Writer

RANK0 = SAMPLES / "build_output/nested_l3_20261130_102011/dfx_outputs/rank0/d0/scope_stats/scope_stats.jsonl"


def errors(events: list[SinkEvent]) -> list[Problem]:
    return [p for e in events if isinstance(e, RunProgress) for p in e.problems if p.severity == "error"]


def follower(path: Path) -> Follower:
    return Follower(path, labels_for(path), Thresholds())


def test_random_split_points_decode_like_one_shot(tmp_path: Path, writer: Writer) -> None:
    data = PAGED.read_bytes()
    path = tmp_path / "scope_stats.jsonl"
    f = follower(path)
    rng = random.Random(7)
    splits = sorted(rng.sample(range(1, len(data)), 60))  # cuts inside lines, mostly
    events: list[SinkEvent] = []
    now = [0.0]

    def poll() -> None:
        now[0] += 0.01
        events.extend(f.poll(now[0], 1000.0))

    writer.write_file(path, data, splits, between=poll)
    poll()
    fins = finished(events)
    assert len(fins) == 1 and fins[0].reason == "complete"
    assert errors(events) == []  # a half-written line was never parsed early
    expected = one_shot(PAGED)
    assert fins[0].summary.peaks == expected.summary.peaks
    assert fins[0].summary.scopes == expected.summary.scopes == 992
    assert sum(1 for e in events if isinstance(e, RunStarted)) == 1


def test_empty_file_then_big_writes_like_the_runtime(tmp_path: Path, writer: Writer) -> None:
    path = tmp_path / "scope_stats.jsonl"
    f = follower(path)
    writer.do("open", path=path, mode="w")
    assert f.poll(0.0, 0.0) == []  # exists, empty: nothing to say yet
    assert f.active
    data = NESTED.read_bytes()
    writer.do("write", data=data[: len(data) // 2])
    first = f.poll(0.1, 0.0)
    assert isinstance(first[0], RunStarted) and first[0].meta is not None
    writer.do("write", data=data[len(data) // 2:])
    writer.do("close")
    fins = finished(f.poll(0.2, 0.0))
    assert [x.reason for x in fins] == ["complete"]
    assert fins[0].summary.scopes == 681
    assert f.poll(0.3, 0.0) == []  # finished and unchanged: silent


def test_rewrite_in_place_seen_as_shrink(tmp_path: Path, writer: Writer) -> None:
    path = tmp_path / "scope_stats.jsonl"
    f = follower(path)
    big = NESTED.read_bytes()
    writer.do("open", path=path, mode="w")
    writer.do("write", data=big[:40_000])  # a run cut short...
    f.poll(0.0, 0.0)
    writer.do("open", path=path, mode="w")  # ...then a re-run truncates the same inode
    ev = f.poll(0.1, 0.0)
    fins = finished(ev)
    assert [x.reason for x in fins] == ["rewritten"]
    assert fins[0].source.generation == 0
    small = PAGED.read_bytes()
    writer.do("write", data=small)
    writer.do("close")
    fins = finished(f.poll(0.2, 0.0))
    assert [x.reason for x in fins] == ["complete"]
    assert fins[0].source.generation == 1
    assert fins[0].summary.scopes == one_shot(PAGED).summary.scopes


def test_rewrite_that_outgrew_the_old_offset_with_identical_first_line(tmp_path: Path, writer: Writer) -> None:
    """Truncate + regrow between two looks, same metadata line: the guard bytes catch it."""
    path = tmp_path / "scope_stats.jsonl"
    data0 = RANK0.read_bytes()
    lines = data0.splitlines(keepends=True)
    other = lines[0] + b"".join(reversed(lines[1:]))  # same first line, other content
    f = follower(path)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=data0[:20_000])
    f.poll(0.0, 0.0)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=other[:30_000])
    ev = f.poll(0.1, 0.0)
    assert [x.reason for x in finished(ev)] == ["rewritten"]
    assert f.run is not None and f.run.source.generation == 1
    assert f.offset == 30_000


def test_replaced_by_rename_ends_the_run(tmp_path: Path, writer: Writer) -> None:
    path = tmp_path / "scope_stats.jsonl"
    f = follower(path)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=NESTED.read_bytes()[:10_000])
    writer.do("close")
    f.poll(0.0, 0.0)
    writer.do("copy", src=PAGED, dst=tmp_path / "new.tmp")
    writer.do("rename", src=tmp_path / "new.tmp", dst=path)
    ev = f.poll(0.1, 0.0)
    assert [x.reason for x in finished(ev)] == ["rewritten", "complete"]
    assert finished(ev)[1].summary.scopes == 992


def test_deleted_file_ends_its_run_cut_short_not_wedged(tmp_path: Path, writer: Writer) -> None:
    path = tmp_path / "scope_stats.jsonl"
    f = follower(path)
    writer.do("open", path=path, mode="w")
    writer.do("write", data=NESTED.read_bytes()[:10_000])  # ends mid-line
    writer.do("close")
    f.poll(0.0, 0.0)
    writer.do("delete", path=path)
    fins = finished(f.poll(0.1, 0.0))
    assert [x.reason for x in fins] == ["deleted"]
    s = fins[0].summary
    assert s.wedged == () and s.open_scopes > 0  # open at the cut, but the runtime did not wedge
    assert s.parse_errors == 0  # the cut last line is not an error
    rules = {x.rule for x in fins[0].findings}
    assert "cut_short" in rules and "wedged" not in rules and "parse_errors" not in rules
    assert f.poll(0.2, 0.0) == []


def test_idle_timeout_finishes_a_cut_file(tmp_path: Path, writer: Writer) -> None:
    path = tmp_path / "scope_stats.jsonl"
    f = follower(path)
    data = NESTED.read_bytes()
    cut = data[:12_345]  # ends mid-line
    writer.do("open", path=path, mode="w")
    writer.do("write", data=cut)
    f.poll(5.0, 0.0)
    assert f.idle_for(5.0 + 29.9) < 30
    assert f.idle_for(35.0) >= 30
    fins = finished(f.finish("idle"))
    assert fins[0].reason == "idle"
    s = fins[0].summary
    assert not s.complete and s.missing and s.open and not s.wedged  # cut short: its open scopes are no wedge
    assert fins[0].verdict.kind == "cut_short"
    assert s.parse_errors == 1  # the half line at the cut, read at finish
    # the file changes again: a new run starts
    writer.do("write", data=data[12_345:])
    writer.do("close")
    fins = finished(f.poll(40.0, 0.0))
    assert [x.reason for x in fins] == ["complete"]


def test_identical_first_lines_in_two_files_are_not_confused(tmp_path: Path, writer: Writer) -> None:
    a, b = tmp_path / "a" / "scope_stats.jsonl", tmp_path / "b" / "scope_stats.jsonl"
    writer.do("mkdir", path=a.parent)
    writer.do("mkdir", path=b.parent)
    data = NESTED.read_bytes()
    lines = data.splitlines(keepends=True)
    writer.do("open", path=a, mode="w")
    writer.do("write", data=data)
    writer.do("close")
    writer.do("open", path=b, mode="w")
    writer.do("write", data=lines[0] + b"".join(lines[1:200]))
    writer.do("close")
    fa, fb = follower(a), follower(b)
    ra, rb = finished(fa.poll(0, 0)), fb.poll(0, 0)
    assert ra[0].summary.records == 1362
    assert fb.run is not None and fb.run.pairer.records == 199
    assert finished(rb) == []


def test_a_digest_saved_by_an_older_ringtrace_is_checked_as_it_was_made(tmp_path: Path) -> None:
    """Digests are XXH3-128 now; a finished run whose saved digest is SHA-256 (state version 3) is still
    recognised after its file's mtime changed, and a wrong one still starts a new run."""
    path = tmp_path / "scope_stats.jsonl"
    data = PAGED.read_bytes()
    path.write_bytes(data)
    f = follower(path)
    assert len(finished(f.poll(1.0, 1e9))) == 1
    assert f.finished is not None and f.finished.digest.startswith(XXH3)
    for saved, again in ((hashlib.sha256(data).hexdigest()[:32], 0), (hashlib.sha256(b"other").hexdigest()[:32], 1)):
        f.finished = f.finished._replace(digest=saved)
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # touched: hashed again to know
        events: list[SinkEvent] = []
        for _ in range(len(data) // SLICE + 3):
            events += f.poll(2.0, 1e9)
        assert len(finished(events)) == again, saved


def test_slices_are_larger_when_no_sink_takes_records(tmp_path: Path) -> None:
    """Sinks that take only summaries get SUMMARY_SLICE-byte slices (fewer hand-offs per MB), sinks that
    take records or pair events SLICE-byte ones; the run reads the same either way."""
    path = tmp_path / "scope_stats.jsonl"
    size = generate_bytes(9 << 20)(path)
    seen: dict[Wants, tuple[int, object]] = {}
    for wants in (WANT_ALL, Wants(records=False), WANT_SUMMARIES):
        f = Follower(path, labels_for(path), Thresholds(), wants=wants)
        events = f.poll(1.0, 1e9)
        fins = finished(events)
        assert len(fins) == 1 and fins[0].reason == "complete"
        seen[wants] = (sum(1 for e in events if isinstance(e, RunProgress)), fins[0].summary)
    assert seen[WANT_ALL][0] == seen[Wants(records=False)][0] == -(-size // SLICE)
    assert seen[WANT_SUMMARIES][0] == -(-size // SUMMARY_SLICE) < seen[WANT_ALL][0]
    assert seen[WANT_SUMMARIES][1] == seen[WANT_ALL][1]
