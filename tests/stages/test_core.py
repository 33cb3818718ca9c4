"""The compiled reading core reads exactly what the pure-Python path reads.

The pure path (``Decoder`` + ``Pairer``, and ``bands.Folder`` for the report's bands) is the reference.  Both
paths are fed the same bytes, in the same chunks -- generated files of every version with every kind of broken
line (``tests/_support/mixed.py``), every real file the runtime wrote, chunk boundaries anywhere -- and must give
the same items, events, summaries and sink events (the bands on ``RunFinished`` among them), whatever the sinks
read.  These run in every test run, on
both paths in one process; ``make test`` also runs the stage and reading tests with ``RINGTRACE_PURE=1``.
"""

from __future__ import annotations

import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.config import PURE_ENV
from ringtrace.model.records import (
    WANT_ALL,
    WANT_SUMMARIES,
    Meta,
    PairEvent,
    Record,
    RunProgress,
    Scope,
    SinkEvent,
    Source,
    Wants,
)
from ringtrace.stages import core
from ringtrace.stages.bands import Folder
from ringtrace.stages.decode import MAX_LINE, VERSIONS, Decoder
from ringtrace.stages.pair import Pairer
from ringtrace.stages.run import Run
from tests._support.mixed import chunks, cuts, metas, mixed_files, records
from tests._support.require import require
from tests._support.samples import SAMPLES

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "samples"  # the runtime's files beside the checkout, where there are any
REPORT = Wants(records=False, events=False, bands=600)  # the report's: the bands alone
WANTS = (WANT_ALL, WANT_SUMMARIES, Wants(records=True, events=False), Wants(records=False, events=True), REPORT,
         Wants(records=True, events=True, bands=2))  # two columns per band: merged over and over
REASONS = ("eof", "complete", "idle", "rewritten", "deleted", "shutdown")


@pytest.fixture(autouse=True)
def _built() -> None:
    require(core.BUILT, "the compiled reading core was not built (no C compiler?)")


def real_files() -> list[Path]:
    """Every scope_stats file in the repository's fixtures and golden cases, and the shared samples."""
    roots = [SAMPLES.parent, ROOT / "tests" / "golden", SHARED]
    seen: dict[bytes, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.jsonl")) if root.is_dir() else []:
            seen.setdefault(path.read_bytes(), path)
    return sorted(seen.values())


def read(data: bytes, at: list[int], compiled: bool, wants: Wants = WANT_ALL, reason: str = "eof") -> list[SinkEvent]:
    run = Run(Source("f.jsonl"), wants=wants, compiled=compiled)
    out: list[SinkEvent] = []
    for piece in chunks(data, at):
        out += run.feed(piece)
    out += run.finish(reason)  # type: ignore[arg-type]
    return out


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixed_files(), st.randoms(use_true_random=False))
def test_runs_read_alike_on_both_paths(data: bytes, rnd: random.Random) -> None:
    at = cuts(rnd, len(data))
    reason = rnd.choice(REASONS)
    for wants in WANTS:
        assert read(data, at, True, wants, reason) == read(data, at, False, wants, reason), wants


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixed_files(), st.randoms(use_true_random=False), st.sampled_from((MAX_LINE, 120, 200, 260, 600)))
def test_decoders_and_pairers_agree_chunk_by_chunk(data: bytes, rnd: random.Random, max_line: int) -> None:
    at = cuts(rnd, len(data))
    cut = rnd.random() < 0.3
    pieces = chunks(data, at)
    reference = Decoder(max_line)
    ref_items = [reference.feed(piece) for piece in pieces] + [reference.finish(cut)]

    # the scanner alone: the same items, counters and held-back bytes as the Python decoder
    alone = core.linked_decoder(None, max_line=max_line)
    assert [alone.feed(piece) for piece in pieces] + [alone.finish(cut)] == ref_items
    assert (alone.line, alone.records, alone.parse_errors, alone.meta, alone.pending) == \
        (reference.line, reference.records, reference.parse_errors, reference.meta, reference.pending)

    # linked to a compiled pairer: records paired as they are read, events chunk by chunk as Pairer gives them
    for keep_records in (True, False):
        reference, pairer = Decoder(max_line), Pairer()
        compiled = core.pairer()
        linked = core.linked_decoder(compiled, keep_records=keep_records, max_line=max_line)
        for i in range(len(pieces) + 1):
            last = i == len(pieces)
            items = reference.finish(cut) if last else reference.feed(pieces[i])
            got = linked.finish(cut) if last else linked.feed(pieces[i])
            assert got == [x for x in items if keep_records or type(x) is not Record]
            for x in items:
                if isinstance(x, Meta):
                    pairer.meta = x
            assert compiled.take_events() == pairer.push_many([x for x in items if type(x) is Record])
            assert linked.parse_errors == reference.parse_errors
            assert compiled.summary(linked.parse_errors, False) == pairer.summary(reference.parse_errors, False)
        assert compiled.summary(3) == pairer.summary(3)
        assert compiled.open_usage() == pairer.open_usage()
        assert compiled.open_scopes == pairer.open_scopes


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records(), metas(), st.randoms(use_true_random=False))
def test_the_pairers_agree_on_any_records(recs: list[Record], meta: Meta | None, rnd: random.Random) -> None:
    """Records the decoder would never pass (negative or huge counters, rings out of range, a dep pool on
    one side only), in batches, with the metadata arriving late: the same events, figures and bands throughout."""
    width = rnd.choice((1, 2, 5, 600))
    pure, compiled, folder = Pairer(), core.pairer(bands=width), Folder(width)
    late = rnd.randint(0, len(recs))
    at = [0, *sorted(rnd.sample(range(len(recs) + 1), min(len(recs) + 1, 4))), len(recs)]
    for a, b in itertools.pairwise(at):
        if a <= late < b or (late == a == b):
            pure.meta = compiled.meta = meta
        batch = recs[a:b]
        events: list[PairEvent] = pure.push_many(batch)
        assert compiled.push_many(batch) == events
        folder.push(batch, events, pure.meta)
        assert compiled.bands() == folder.bands()
        assert compiled.summary(a, False) == pure.summary(a, False)
        for name in ("records", "scopes", "unmatched_begins", "unmatched_ends", "max_depth", "depth_cap_line",
                     "uncounted"):
            assert getattr(compiled, name) == getattr(pure, name), name
    assert compiled.open_usage() == pure.open_usage()
    assert compiled.summary() == pure.summary()
    if recs:
        assert compiled.push(recs[0]) == pure.push(recs[0])


def test_every_real_file_reads_alike() -> None:
    files = real_files()
    assert len(files) >= 20  # the samples, the sizing runs and the golden cases' inputs
    rnd = random.Random(27)
    for path in files:
        data = path.read_bytes()
        for at in ([], [1 << 20], cuts(rnd, len(data)), list(range(4093, len(data), 4093))):
            for wants in (WANT_ALL, WANT_SUMMARIES, REPORT, Wants(records=False, events=False, bands=7)):
                assert read(data, at, True, wants) == read(data, at, False, wants), (path, at[:3], wants)


def test_a_file_with_more_sites_than_the_site_cache_holds_reads_alike() -> None:
    """The scanner keeps one str per distinct site (2,048 at most, then it starts over): 5,000 sites."""
    lines = [b'{"version": 6, "fatal": false, "dropped": 0, "task_window_max": [8, 8, 8, 8], '
             b'"heap_max": [64, 64, 64, 64], "dep_pool_max": [8, 8, 8, 8], "tensormap_max": 9}']
    for i in range(5000):
        for phase in ("begin", "end"):
            lines.append(b'{"site": "s%d.cpp:%d", "phase": "%s", "depth": 0, "ring": 0, "task_window_start": %d, '
                         b'"task_window_end": %d, "heap_start": 0, "heap_end": %d, "dep_pool_start": 1, '
                         b'"dep_pool_end": 1, "tensormap": 0}' % (i, i % 7, phase.encode(), i, i + 1, i))
    data = b"\n".join(lines) + b"\n"
    compiled = read(data, [len(data) // 3], True)
    assert compiled == read(data, [len(data) // 3], False)
    scopes = [e for ev in compiled if isinstance(ev, RunProgress) for e in ev.events]
    assert len(scopes) == 5000 and all(isinstance(s, Scope) for s in scopes)
    assert [(s.site, s.begin_line) for s in scopes[::2500]] == [("s0.cpp:0", 2), ("s2500.cpp:1", 5002)]  # type: ignore[union-attr]


def test_the_scanner_takes_the_runtime_lines_and_nothing_else() -> None:
    """The fast path is the runtime's own lines: a clean file is scanned whole, and any other line goes to
    the Python decoder (counted here by the lines the scanner leaves)."""
    good = (b'{"site": "a.cpp:1", "phase": "begin", "depth": 1, "ring": 1, "task_window_start": 0, '
            b'"task_window_end": 2, "heap_start": 0, "heap_end": 512, "dep_pool_start": 1, "dep_pool_end": 3, '
            b'"tensormap": 4}')
    others = [good.replace(b", ", b","), good.replace(b'"depth": 1', b'"depth": 01'),
              good.replace(b'"a.cpp:1"', b'"a\\u0041.cpp:1"'), good.replace(b'"a.cpp:1"', b'"caf\xc3\xa9"'),
              good.replace(b"512", b"1000000000000000000"), good + b"\r", good + b" ", good[:-1],
              good.replace(b'"tensormap": 4', b'"tensormap": 4.0'), good.replace(b"begin", b"task")]
    _core = core.compiled_module()  # built (the fixture above)
    scanner = _core.Scanner()
    assert scanner.configure(VERSIONS[6].wraps, all(VERSIONS[6].carried), 4, (), MAX_LINE)
    out: list[object] = []
    assert scanner.scan(good + b"\n" + good, 0, 2 * len(good) + 1, 2, out) == (2 * len(good) + 1, 2, 2)
    assert len(out) == 2 and isinstance(out[0], Record) and out[1].line == 3  # type: ignore[attr-defined]
    for other in others:
        fresh = _core.Scanner()
        fresh.configure(VERSIONS[6].wraps, all(VERSIONS[6].carried), 4, (), MAX_LINE)
        assert fresh.scan(other + b"\n", 0, len(other) + 1, 2, []) == (0, 0, 0), other


def test_ringtrace_pure_selects_the_pure_path() -> None:
    """``RINGTRACE_PURE=1`` (read at import) selects the pure path for every run; without it a run reads
    through the core; ``compiled=`` chooses for one run."""
    probe = "from ringtrace.stages import core; print(core.COMPILED)"
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    assert subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
    assert subprocess.run([sys.executable, "-c", probe], env={**env, PURE_ENV: "1"}, capture_output=True,
                          text=True, check=True).stdout.strip() == "False"
    assert isinstance(Run(Source("x"), compiled=True).decoder.scanner, core.Linked)
    assert Run(Source("x"), compiled=False).decoder.scanner is None
    assert isinstance(Run(Source("x")).decoder.scanner, core.Linked) == core.COMPILED
