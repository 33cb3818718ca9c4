"""The compiled Perfetto encoder (``_encode.c``) writes the bytes of the pure-Python reference.

:func:`ringtrace.sinks.perfetto._records.encode` is the reference.  Both are fed the same sink events --
records and pair events drawn anyhow (any ring, site, phase and line; values from 0 to past 2**64, negative;
Scopes with usage missing or of another length, begun on another ring; abandoned scopes; events on no
record's line), generated files of every version with broken lines read by the real stages, every real file
-- and must leave the same packets (and raise the same error, after the same packets, where the reference
raises).  The compiled encoder must also do the work: it hands the reference only the records that need a
rare packet.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.model.records import (
    Abandoned,
    Meta,
    OpenScope,
    PairEvent,
    Record,
    RunProgress,
    RunStarted,
    Scope,
    SinkEvent,
    Source,
    UnmatchedEnd,
    Usage,
)
from ringtrace.sinks.perfetto import _records
from ringtrace.sinks.perfetto._file import TraceFile
from ringtrace.sinks.perfetto._trace_writer import ProtoTrace
from ringtrace.stages.run import Run
from tests._support.mixed import chunks, cuts, mixed_files
from tests._support.require import require
from tests._support.samples import real_files

ROOT = Path(__file__).resolve().parents[3]
SOURCE = Source("f.jsonl")


@pytest.fixture(autouse=True)
def _built() -> None:
    require(_records.BUILT, "the compiled Perfetto encoder was not built (no C compiler?)")


def packets(events: Sequence[SinkEvent], compiled: bool, close: bool = False) -> tuple[bytes, str]:
    """The packets a ProtoTrace leaves for ``events`` (nothing spilled), and the error it raised ("" none)."""
    with tempfile.TemporaryDirectory() as tmp:
        tf = TraceFile(Path(tmp) / "t.pftrace", batch=1 << 60)  # never full: every packet stays in parts
        trace = ProtoTrace(tf, defer_processes=True, compiled=compiled)
        error = ""
        try:
            for ev in events:
                trace.receive(ev)
            if close:
                trace.close()
        except Exception as err:
            error = f"{type(err).__name__}: {err}"
        data = b"".join(tf.parts)
        tf.abort()
    return data, error


def same(events: Sequence[SinkEvent], close: bool = False) -> None:
    ref = packets(events, compiled=False, close=close)
    got = packets(events, compiled=True, close=close)
    assert got[1] == ref[1]
    assert got[0] == ref[0]


# -- drawn anyhow -------------------------------------------------------------------------------------------

EDGES = (2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 2**70, -1)
VALUE = st.one_of(st.integers(0, 200), st.integers(0, 200), st.integers(0, 5000), st.integers(-(2**63), 2**63 - 1),
                  st.sampled_from(EDGES))
CAP = st.one_of(st.integers(1, 5000), st.integers(1, 2**62), st.sampled_from((0, 2**63, 2**64 + 7)))
SITE = st.sampled_from(("a.cpp:1", "b.cpp:2", "c.cpp:3", "", "caf\u00e9.cpp:5"))
PHASE: st.SearchStrategy[Any] = st.sampled_from(("begin", "end", "begin", "end", "Begin"))  # "Begin": not a begin
RING = st.one_of(st.integers(0, 3), st.just(2**64))


@st.composite
def usage(draw: st.DrawFn) -> tuple[Usage | None, ...]:
    one = st.one_of(st.none(), st.builds(Usage, VALUE, VALUE, VALUE))
    n = draw(st.sampled_from((3, 3, 3, 3, 2, 4)))
    return tuple(draw(one) for _ in range(n))


@st.composite
def pair_events(draw: st.DrawFn, line: int) -> list[PairEvent]:
    out: list[PairEvent] = []
    for kind in draw(st.lists(st.sampled_from(("scope", "scope", "scope", "abandoned", "unmatched")), max_size=3)):
        if kind == "scope":
            out.append(Scope(draw(SITE), draw(VALUE), draw(RING), draw(VALUE), line, 0, draw(usage()),
                             begin_ring=draw(st.one_of(st.none(), st.none(), st.none(), RING))))
        elif kind == "abandoned":
            out.append(Abandoned(OpenScope(draw(SITE), draw(VALUE), draw(RING), draw(VALUE)), line))
        else:
            out.append(UnmatchedEnd(draw(SITE), draw(VALUE), draw(RING), line))
    return out


@st.composite
def runs(draw: st.DrawFn) -> list[SinkEvent]:
    """A run's events: maybe a Meta (capacities: use-% counters), then progress in pieces."""
    out: list[SinkEvent] = []
    if draw(st.booleans()):
        caps = [tuple(draw(CAP) for _ in range(4)) for _ in range(3)]
        out.append(RunStarted(SOURCE, Meta(5, False, 0, None, caps[0], caps[1], caps[2], 16)))
    line = draw(st.sampled_from((0, 1, 1, 1, -1)))
    for _ in range(draw(st.integers(1, 4))):
        records: list[Record] = []
        events: list[PairEvent] = []
        for _ in range(draw(st.integers(0, 30))):
            line += draw(st.sampled_from((1, 1, 1, 1, 0, 2, -1, 2**64)))
            dp = draw(st.one_of(st.none(), st.tuples(st.one_of(st.none(), VALUE), st.one_of(st.none(), VALUE))))
            records.append(Record(line, draw(SITE), draw(PHASE), draw(VALUE), draw(RING), draw(VALUE), draw(VALUE),
                                  draw(VALUE), draw(VALUE), dp[0] if dp else None, dp[1] if dp else None,
                                  draw(VALUE)))
            if draw(st.integers(0, 2)) == 0:
                events += draw(pair_events(line + draw(st.sampled_from((0, 0, 0, 0, 1, -1)))))
        out.append(RunProgress(SOURCE, tuple(records), tuple(events), ()))
    return out


DRAWN = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(DRAWN, max_examples=100)
@given(runs())
def test_drawn_records_encode_alike(events: list[SinkEvent]) -> None:
    same(events)


@pytest.mark.slow  # 600 draws, ~45 s: make test, not test-fast
@settings(DRAWN, max_examples=600)
@given(runs())
def test_many_drawn_records_encode_alike(events: list[SinkEvent]) -> None:
    same(events)


def test_edges_encode_alike() -> None:
    """Values at the ends of what the compiled encoder takes, and just past them, on every counter."""
    meta = Meta(5, False, 0, None, (7, 1), (3, 2**62), (1, 5), 16)
    for v in (*EDGES, 0, 127, 128, 16383, 16384):
        recs = [Record(1, "a", "begin", 1, 0, 0, 5, 0, 5, 0, 5, 0), Record(2, "a", "begin", 1, 1, 0, 5, 0, 5, 0, 5, 0)]
        for field in range(5, 12):
            for ring in (0, 1):
                vals: list[int | None] = [0, 5, 0, 5, 0, 5, 0]
                vals[field - 5] = v
                recs.append(Record(len(recs) + 1, "a", "end", 1, ring, *vals))  # type: ignore[arg-type]
        scope = Scope("a", v, 0, v, len(recs) + 1, 0, (Usage(v, 1, 2), None, Usage(3, v, v)))
        recs.append(Record(len(recs) + 1, "a", "end", 1, 0, 0, 5, 0, 5, 0, 5, 0))
        same([RunStarted(SOURCE, meta), RunProgress(SOURCE, tuple(recs), (scope,), ())])


# -- read by the stages -------------------------------------------------------------------------------------

def read(data: bytes, at: list[int]) -> list[SinkEvent]:
    run = Run(Source("f.jsonl"))
    out: list[SinkEvent] = []
    for piece in chunks(data, at):
        out += run.feed(piece)
    return out + run.finish("eof")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mixed_files(), st.randoms(use_true_random=False))
def test_generated_files_encode_alike(data: bytes, rnd: random.Random) -> None:
    same(read(data, cuts(rnd, len(data))), close=True)


@pytest.mark.parametrize("path", real_files(), ids=lambda p: str(p.relative_to(p.parents[3])))
def test_real_files_encode_alike(path: Path) -> None:
    same(read(path.read_bytes(), []), close=True)


def test_the_compiled_encoder_does_the_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """It hands the reference only the records that make a ring, intern a site or end an abandoned scope."""
    calls: list[int] = []
    reference = _records.encode

    def counted(*args: object) -> int:
        calls.append(1)
        return reference(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_records, "encode", counted)
    big = max(real_files(), key=lambda p: p.stat().st_size)
    events = read(big.read_bytes(), [])
    progress = [e for e in events if isinstance(e, RunProgress)]
    records = sum(len(e.records) for e in progress)
    firsts = {(r.ring, r.site if r.phase == "begin" else "") for e in progress for r in e.records}
    abandoned = sum(isinstance(x, Abandoned) for e in progress for x in e.events)
    packets(events, compiled=True)
    assert records > 1000
    assert 0 < len(calls) <= len(firsts) + abandoned


# -- where it is not used -----------------------------------------------------------------------------------

def _probe(env: dict[str, str], block: bool = False) -> str:
    code = ("import sys\n"
            + ("sys.modules['ringtrace.sinks.perfetto._encode'] = None\n" if block else "")
            + "from ringtrace.sinks.perfetto import _records\nprint(_records.BUILT, _records.COMPILED)")
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return res.stdout.strip()


def test_ringtrace_pure_selects_the_reference() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RINGTRACE_PURE"}
    assert _probe(env) == "True True"
    assert _probe({**env, "RINGTRACE_PURE": "1"}) == "True False"


def test_without_the_compiled_module_the_reference_writes(tmp_path: Path) -> None:
    """As on a machine without a C compiler: no module, the pure encoder, the same trace."""
    env = {k: v for k, v in os.environ.items() if k != "RINGTRACE_PURE"}
    assert _probe(env, block=True) == "False False"
    src = max(real_files(), key=lambda p: p.stat().st_size)
    outs = []
    for name, block in (("with.pftrace", False), ("without.pftrace", True)):
        out = tmp_path / name
        code = ("import sys\n"
                + ("sys.modules['ringtrace.sinks.perfetto._encode'] = None\n" if block else "")
                + "from ringtrace.cli import main\nsys.exit(main(['convert', sys.argv[1], '-o', sys.argv[2]]))")
        subprocess.run([sys.executable, "-c", code, str(src), str(out)], env=env, cwd=ROOT, check=True,
                       capture_output=True)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_a_machine_without_a_compiler_is_told_in_one_line(tmp_path: Path) -> None:
    """The build (``pip install``, ``make``) without a C compiler: it succeeds and says so in one line."""
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    res = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                          "--build-temp", str(tmp_path / "tmp")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode == 0
    lines = [line for line in res.stderr.splitlines() if line.startswith("ringtrace:")]
    assert lines == [f"ringtrace: the compiled reading core and the Perfetto encoder were not built ([Errno 2] No such "
                     f"file or directory: '{tmp_path / 'no-such-cc'}'); the pure-Python path will be used"]
    assert not list((tmp_path / "lib").rglob("*.so"))


def test_an_in_place_build_names_the_compiler_not_the_copy(tmp_path: Path) -> None:
    """``make``'s ``build_ext --inplace`` with a compiler that fails: the line gives that reason, not the copy
    of the modules that were not built (which fails after it)."""
    for rel in ("setup.py", "ringtrace/sinks/perfetto/_encode.c"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copytree(ROOT / "ringtrace/stages/_core_src", tmp_path / "ringtrace/stages/_core_src")
    env = {**os.environ, "CC": "false"}
    res = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0
    lines = [line for line in res.stderr.splitlines() if line.startswith("ringtrace:")]
    assert lines == ["ringtrace: the compiled reading core and the Perfetto encoder were not built (the C compiler "
                     "failed); the pure-Python path will be used"]
