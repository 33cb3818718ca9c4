"""The decoder's and pairer's batch fast paths read exactly what the line-by-line paths read.

``Decoder.feed`` decodes the whole lines of a chunk with one ``decode_lines`` call when it can
prove that gives the same records as reading line by line, and ``Pairer.push_many`` pairs a
batch in one loop.  Here every kind of bad line the decoder knows (and some that only matter
to the batch path: two values on a line, a value spread over two lines, blank lines between,
lines over ``max_line``) is mixed into files, and the file fed whole must decode, pair and
summarise identically to the same file fed one line per call -- which never takes the fast path.
"""

from __future__ import annotations

import itertools
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.model.records import Meta, PairEvent, Problem, Record, RunProgress, RunSummary, Source
from ringtrace.stages.decode import MAX_LINE, Decoder, Item
from ringtrace.stages.pair import Pairer
from ringtrace.stages.run import Run

SITES = ("(unknown):0", "a.cpp:1", "b.cpp:2", 'q"uote.cpp:3', "br}{ace.cpp:4")


class _CountingDecoder(Decoder):
    """Counts the lines that went through the per-line path."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        super().__init__(max_line)
        self.slow_lines = 0

    def _line(self, raw: bytes, out: list[Item]) -> None:
        self.slow_lines += 1
        super()._line(raw, out)


def _record(rnd: random.Random, state: dict[int, list[int]], **over: Any) -> dict[str, Any]:
    ring = rnd.randint(0, 3)
    counters = state.setdefault(ring, [0, 0, 0, 0, 1, 1])
    for i in (1, 3, 5):
        counters[i] += rnd.randint(0, 30)
        counters[i - 1] += rnd.randint(0, counters[i] - counters[i - 1])
    rec = {"site": rnd.choice(SITES[:3]), "phase": rnd.choice(("begin", "end")), "depth": rnd.randint(0, 3),
           "ring": ring, "task_window_start": counters[0], "task_window_end": counters[1],
           "heap_start": counters[2], "heap_end": counters[3], "dep_pool_start": counters[4],
           "dep_pool_end": counters[5], "tensormap": rnd.randint(0, 9)}
    rec.update(over)
    return rec


def _enc(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec).encode()


CHECKED = ("backwards", "negative", "task", "deep", "ring", "no_dep_pool", "brace_site")
"""Lines that decode as records and fail (or pass) only the decoder's own checks."""
MALFORMED = ("blank", "spaces", "two_on_a_line", "split", "crlf", "bad_json", "unescaped_site", "leading_space",
             "trailing_space", "metadata_again", "cut_utf8", "not_an_object")
"""Lines that one ``decode_lines`` call cannot read as one record per line."""


def _line(kind: str, rnd: random.Random, state: dict[int, list[int]]) -> bytes:
    if kind == "good":
        return _enc(_record(rnd, state))
    if kind == "backwards":
        rec = _record(rnd, state)
        field = rnd.choice(("task_window_start", "task_window_end", "heap_start", "heap_end", "dep_pool_start",
                            "dep_pool_end"))
        return _enc({**rec, field: max(rec[field] - 40, 0)})
    if kind == "negative":
        return _enc(_record(rnd, state, tensormap=-1))
    if kind == "task":
        return _enc(_record(rnd, state, phase="task"))
    if kind == "deep":
        return _enc(_record(rnd, state, depth=rnd.choice((-1, 65))))
    if kind == "ring":
        return _enc(_record(rnd, state, ring=9))
    if kind == "no_dep_pool":
        rec = _record(rnd, state)
        del rec["dep_pool_start"]
        return _enc(rec)
    if kind == "blank":
        return b""
    if kind == "spaces":
        return b"   "
    if kind == "two_on_a_line":
        return _enc(_record(rnd, state)) + rnd.choice((b"", b" ")) + _enc(_record(rnd, state))
    if kind == "split":
        raw = _enc(_record(rnd, state))
        at = raw.index(b", ") + 1
        return raw[:at] + b"\n" + raw[at:]
    if kind == "crlf":
        return _enc(_record(rnd, state)) + b"\r"
    if kind == "bad_json":
        return _enc(_record(rnd, state))[:-7]
    if kind == "unescaped_site":  # written raw by the runtime: a '"' in the file name
        return _enc(_record(rnd, state, site="SITE")).replace(b'"SITE"', b'"q"uote.cpp:3"')
    if kind == "brace_site":
        return _enc(_record(rnd, state, site=SITES[4]))
    if kind == "leading_space":
        return b" " + _enc(_record(rnd, state))
    if kind == "trailing_space":
        return _enc(_record(rnd, state)) + b" "
    if kind == "metadata_again":
        return _meta(6)
    if kind == "cut_utf8":
        return _enc(_record(rnd, state, site="SITE")).replace(b'"SITE"', b'"caf\xc3"')
    assert kind == "not_an_object"
    return b"[1, 2]"


def _meta(version: int) -> bytes:
    return _enc({"version": version, "fatal": False, "dropped": 0,  # no "total": unknown
                 "task_window_max": [64] * 4, "heap_max": [1 << 16] * 4, "dep_pool_max": [64] * 4,
                 "tensormap_max": 16})


@st.composite
def files(draw: st.DrawFn) -> tuple[bytes, int]:
    rnd = draw(st.randoms(use_true_random=False))
    version = draw(st.sampled_from((4, 5, 6, 6, 6, 7, 0)))  # 0: no metadata line
    n = draw(st.integers(0, 60))
    p_bad = draw(st.sampled_from((0.0, 0.02, 0.1, 0.5)))
    bad = draw(st.sampled_from((CHECKED, CHECKED + MALFORMED, *((kind,) for kind in MALFORMED))))
    state: dict[int, list[int]] = {}
    lines = [] if version == 0 else [_meta(version)]
    for _ in range(n):
        kind = rnd.choice(bad) if rnd.random() < p_bad else "good"
        lines.append(_line(kind, rnd, state))
    data = b"\n".join(lines) + draw(st.sampled_from((b"\n", b"", b"\n\n")))
    max_line = draw(st.sampled_from((MAX_LINE, MAX_LINE, 200, 280, 600)))
    return data, max_line


def _decode(data: bytes, max_line: int, cuts: list[int]) -> tuple[list[Item], _CountingDecoder]:
    dec = _CountingDecoder(max_line)
    out: list[Item] = []
    bounds = [0, *cuts, len(data)]
    for a, b in itertools.pairwise(bounds):
        out.extend(dec.feed(data[a:b]))
    out.extend(dec.finish())
    return out, dec


def _line_cuts(data: bytes) -> list[int]:
    """Offsets that feed ``data`` one line per call: the per-line path only."""
    return [i + 1 for i, byte in enumerate(data) if byte == 0x0A and i + 1 < len(data)]


def _pair_each(items: list[Item], parse_errors: int = 0) -> tuple[list[PairEvent], RunSummary]:
    p = Pairer()
    events: list[PairEvent] = []
    for item in items:
        if isinstance(item, Meta):
            p.meta = item
        elif isinstance(item, Record):
            events.extend(p.push(item))
    return events, p.summary(parse_errors)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files(), st.data())
def test_fed_whole_or_in_chunks_reads_like_line_by_line(file: tuple[bytes, int], data: st.DataObject) -> None:
    raw, max_line = file
    reference, ref_dec = _decode(raw, max_line, _line_cuts(raw))
    whole, dec = _decode(raw, max_line, [])
    assert whole == reference
    assert (dec.line, dec.records, dec.parse_errors) == (ref_dec.line, ref_dec.records, ref_dec.parse_errors)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    assert _decode(raw, max_line, cuts)[0] == reference

    # the batch pairer and Run see the same: events, and the summary
    ref_events, ref_summary = _pair_each(reference, ref_dec.parse_errors)
    run = Run(Source("f"), compiled=False)
    run.reader.decoder = Decoder(max_line)
    run_events: list[PairEvent] = []
    bounds = [0, *cuts, len(raw)]
    for a, b in itertools.pairwise(bounds):
        for ev in run.feed(raw[a:b]):
            if isinstance(ev, RunProgress):
                run_events.extend(ev.events)
    for ev in run.finish("eof"):
        if isinstance(ev, RunProgress):
            run_events.extend(ev.events)
    assert run_events == ref_events
    assert run.summary(finished=True) == ref_summary


def test_a_clean_file_is_decoded_in_one_call_per_chunk() -> None:
    rnd = random.Random(1)
    state: dict[int, list[int]] = {}
    data = b"\n".join([_meta(6), *(_line("good", rnd, state) for _ in range(500))]) + b"\n"
    items, dec = _decode(data, MAX_LINE, [len(data) // 2])
    assert dec.records == 500 and dec.parse_errors == 0 and len(items) == 501
    assert dec.slow_lines == 2  # the metadata line, and the line completed by the second chunk
    assert [i.line for i in items if isinstance(i, Record)] == list(range(2, 502))


def test_push_many_is_push_on_each() -> None:
    rnd = random.Random(2)
    state: dict[int, list[int]] = {}
    data = b"\n".join([_meta(6), *(_line("good", rnd, state) for _ in range(2000))]) + b"\n"
    items, _ = _decode(data, MAX_LINE, [])
    records = [i for i in items if isinstance(i, Record)]
    ref_events, ref_summary = _pair_each(items)
    assert any(type(e).__name__ == "Abandoned" for e in ref_events)  # the random file pairs badly too
    p = Pairer(items[0] if isinstance(items[0], Meta) else None)
    events = p.push_many(records[:700]) + p.push_many(records[700:]) + p.push_many([])
    assert events == ref_events and p.summary() == ref_summary


def test_a_first_line_held_until_line_2_is_reported_in_line_order_however_fed() -> None:
    """Found by the property above (CI, 2026-12-02): a first line that is not a metadata line is held
    until line 2 shows the file is a scope_stats file.  The per-line path put its problem after line
    2's record, the batch path before it; both now keep line order, at every cut."""
    rnd = random.Random(0)
    state: dict[int, list[int]] = {}
    raw = b"\n".join([_line("cut_utf8", rnd, state), *(_line("good", rnd, state) for _ in range(3))]) + b"\n"
    reference, _ = _decode(raw, MAX_LINE, _line_cuts(raw))
    first, second = reference[:2]
    assert isinstance(first, Problem) and first.line == 1 and isinstance(second, Record) and second.line == 2
    for cut in range(len(raw) + 1):
        assert _decode(raw, MAX_LINE, [cut])[0] == reference, cut
    assert _decode(raw, MAX_LINE, [])[0] == reference
