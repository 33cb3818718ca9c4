"""Decoder unit tests: chunking, versions 4-7, wrap unrolling, per-line problems.

Bad input is tested here at the decoder level (the reason key, the line, the count); the
same cases go through the CLI in ``test_cli.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from ringtrace.model.records import Meta, Problem, Record
from ringtrace.stages.decode import MAX_LINE, Decoder
from tests._support.samples import SAMPLES, SMALL
from tests._support.scope_stats import Line, encode_lines, meta, read_bytes, read_lines, rec, with_totals

WEDGED = SAMPLES / "failed/NestedScopes_window4_flow_control_deadlock/dfx_outputs/scope_stats/scope_stats.jsonl"


def _decode_all(data: bytes, cuts: list[int]) -> list[object]:
    dec = Decoder()
    out: list[object] = []
    bounds = [0, *cuts, len(data)]
    for a, b in itertools.pairwise(bounds):
        out.extend(dec.feed(data[a:b]))
    out.extend(dec.finish())
    return out


# -- chunking ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SMALL, WEDGED], ids=["default", "wedged"])
def test_every_split_point_decodes_identically(path: Path) -> None:
    data = path.read_bytes()
    whole = _decode_all(data, [])
    assert sum(isinstance(i, Record) for i in whole) == data.count(b"\n") - 1
    for cut in range(1, len(data)):
        assert _decode_all(data, [cut]) == whole, f"split at byte {cut}"


def test_byte_by_byte_feeding_decodes_identically() -> None:
    data = SMALL.read_bytes()
    assert _decode_all(data, list(range(1, len(data)))) == _decode_all(data, [])


def test_last_line_without_newline_is_held_back_until_finish() -> None:
    data = SMALL.read_bytes().rstrip(b"\n")
    last_len = len(data) - data.rfind(b"\n") - 1
    dec = Decoder()
    items = dec.feed(data)
    assert sum(isinstance(i, Record) for i in items) == 3  # 4 records, the last one held back
    assert dec.pending == last_len
    rest = dec.finish()
    assert [type(i) for i in rest] == [Record]
    assert isinstance(rest[0], Record) and rest[0].line == 5 and rest[0].site == "(unknown):0"
    assert dec.pending == 0 and dec.parse_errors == 0


def test_completed_partial_line_is_decoded_once() -> None:
    line = encode_lines([meta(), rec("a", "begin", 1)])
    dec = Decoder()
    first = dec.feed(line[:-10])
    second = dec.feed(line[-10:])
    assert [type(i) for i in first] == [Meta]
    assert [type(i) for i in second] == [Record]
    assert dec.finish() == [] and dec.records == 1


# -- versions ---------------------------------------------------------------------------------


def test_v6_sample_metadata_and_first_record() -> None:
    d = read_bytes(WEDGED.read_bytes())
    assert d.meta == Meta(version=6, fatal=False, dropped=0, total=5, task_window_max=(4, 4, 4, 4),
                          heap_max=(268435456,) * 4, dep_pool_max=(16384,) * 4, tensormap_max=65536)
    assert d.records[-1] == Record(6, "nested_dummy_small_orch.cpp:75", "begin", 4, 3, 0, 3, 0, 5120, 1, 5, 1)
    assert d.problems == []


def test_v6_heap_is_taken_as_is_even_past_capacity() -> None:
    d = read_lines(with_totals([rec("a", "begin", 1, heap=(0, 900)), rec("a", "end", 1, heap=(1500, 2100))],
                               heap=1000))
    assert [(r.heap_start, r.heap_end) for r in d.records] == [(0, 900), (1500, 2100)]


def test_v4_has_no_dep_pool() -> None:
    lines = [meta(version=4, total=2), rec("a", "begin", 1, dp=None), rec("a", "end", 1, dp=None, tw=(0, 3))]
    d = read_lines(lines)
    assert d.meta is not None and d.meta.dep_pool_max == ()
    assert all(r.dep_pool_start is None and r.dep_pool_end is None for r in d.records)
    assert d.problems == []
    s = d.summary
    assert {p.resource for p in s.peaks} == {"task_window", "heap"}
    scope = d.events[0]
    assert scope.usage[2] is None  # type: ignore[union-attr]


def test_v4_dep_pool_fields_if_present_are_ignored() -> None:
    d = read_lines([meta(version=4, total=1), rec("a", "begin", 1, dp=(3, 9))])
    assert d.records[0].dep_pool_start is None and d.problems == []


@pytest.mark.parametrize("version", [4, 5])
def test_wrapped_heap_is_unrolled_per_ring(version: int) -> None:
    dp = None if version == 4 else (1, 1)
    lines = [
        meta(version=version, heap=[100, 100, 50, 100], total=8),
        rec("a", "begin", 1, heap=(90, 95), dp=dp),  # ring 1: tail 90, head 95
        rec("b", "begin", 2, heap=(40, 45), dp=dp),  # ring 2 (cap 50): independent of ring 1
        rec("b", "end", 2, heap=(45, 5), dp=dp),  # ring 2 wrapped: head 45 + 10 = 55, tail 55 - 10 = 45
        rec("a", "end", 1, heap=(95, 5), dp=dp),  # ring 1 wrapped: head 95 + 10 = 105, tail 95
        rec("a", "begin", 1, heap=(5, 5), dp=dp),  # equal raw offsets: empty ring at 105
        rec("a", "end", 1, heap=(5, 60), dp=dp),  # 160 / 105
        rec("a", "begin", 1, heap=(50, 40), dp=dp),  # raw_head 40 < raw_tail 50: head 160 + 80 = 240, live 90
        rec("a", "end", 1, heap=(60, 60), dp=dp),  # head 240 + 20 = 260, empty
    ]
    d = read_lines(lines)
    assert d.problems == []
    got = [(r.ring, r.heap_start, r.heap_end) for r in d.records]
    assert got == [(1, 90, 95), (2, 40, 45), (2, 45, 55), (1, 95, 105), (1, 105, 105), (1, 105, 160),
                   (1, 150, 240), (1, 260, 260)]
    # the scope over the wrap: high_water = 105 - 90, live = 105 - 95, alloc = 105 - 95
    heap = [e.usage[1] for e in d.events]  # type: ignore[union-attr]
    assert (heap[1].high_water, heap[1].live_at_exit, heap[1].alloc) == (15, 10, 10)  # type: ignore[union-attr]


def test_v5_first_sample_already_wrapped_gives_non_negative_tail() -> None:
    d = read_lines([meta(version=5, heap=100, total=1), rec("a", "begin", 1, heap=(90, 10))])
    r = d.records[0]
    assert r.heap_end - r.heap_start == 20
    assert r.heap_start >= 0


def test_v6_monotonic_heap_is_not_unrolled_with_small_capacity() -> None:
    d = read_lines([meta(version=6, heap=100, total=2), rec("a", "begin", 1, heap=(250, 290)),
                    rec("a", "end", 1, heap=(250, 330))])
    assert [(r.heap_start, r.heap_end) for r in d.records] == [(250, 290), (250, 330)]


def test_newer_version_is_read_as_6_with_a_warning() -> None:
    lines = [meta(version=7, total=2, new_meta_field=[1, 2]),
             rec("a", "begin", 1, heap=(0, 5000), new_field="x"), rec("a", "end", 1, heap=(0, 6000), other={"k": 1})]
    d = read_lines(lines)
    assert d.meta is not None and d.meta.version == 7
    assert [(p.line, p.reason, p.severity) for p in d.problems] == [(1, "newer_version", "warning")]
    assert d.decoder.parse_errors == 0
    assert [(r.heap_start, r.heap_end) for r in d.records] == [(0, 5000), (0, 6000)]  # monotonic, not unrolled
    assert d.summary.scopes == 1


def test_unknown_extra_fields_are_ignored_in_v6() -> None:
    d = read_lines([meta(total=1, host="x"), rec("a", "begin", 1, task_id=7, thread=3)])
    assert d.problems == [] and len(d.records) == 1


def test_old_version_is_rejected_and_rest_ignored() -> None:
    d = read_lines([{"version": 3, "fatal": False, "dropped": 0, "total": 1},
                    {"site": "a", "depth": 1, "ring": 1, "task_window": 3, "heap": "1/2", "tensormap": "0/5"}])
    assert [p.reason for p in d.errors] == ["unsupported_version"]
    assert "version 3" in d.errors[0].message and d.errors[0].line == 1
    assert d.records == [] and d.meta is None


def test_task_records_are_ignored_with_one_warning() -> None:
    lines = with_totals([rec("<root>", "begin", 0), rec("k", "task", 1, task_id=1), rec("k", "task", 1, task_id=2),
                         rec("<root>", "end", 0, tw=(0, 2))])
    d = read_lines(lines)
    assert [(p.line, p.reason, p.severity) for p in d.problems] == [(3, "task_records", "warning")]
    assert d.decoder.parse_errors == 0
    assert [r.site for r in d.records] == ["<root>", "<root>"]
    s = d.summary
    assert s.scopes == 1 and s.wedged == ()
    assert s.peaks[0].high_water_site == "<root>"


def test_no_capacities_in_metadata_warns_and_allows_4_rings() -> None:
    d = read_lines([{"version": 6, "fatal": False, "dropped": 0, "total": 2},
                    rec("a", "begin", 3), rec("a", "end", 3)])
    assert [p.reason for p in d.problems] == ["no_capacities"]
    assert d.summary.scopes == 1
    assert all(p.capacity is None and p.high_water_ratio is None for p in d.summary.peaks)


def test_zero_capacities_mean_unknown_capacity() -> None:
    # the other runtime variant: everything on ring 0, *_start 0, some capacities 0
    d = read_lines([meta(task_window=[64, 0, 0, 0], heap=[4096, 0, 0, 0], total=4),
                    rec("a", "begin", 1, ring=0, tw=(0, 0)), rec("b", "begin", 2, ring=0, tw=(0, 2)),
                    rec("b", "end", 2, ring=0, tw=(0, 5)), rec("a", "end", 1, ring=0, tw=(0, 9))])
    assert d.errors == []
    tw = next(p for p in d.summary.peaks if p.resource == "task_window")
    assert (tw.ring, tw.capacity, tw.high_water, tw.high_water_site) == (0, 64, 9, "a")


# -- per-line problems: the rest of the file is still read -------------------------------------

GOOD_TAIL = [rec("z", "begin", 1, tw=(10, 10)), rec("z", "end", 1, tw=(10, 12))]


def _bad(line: str | bytes | dict[str, object]) -> tuple[list[Problem], int, int]:
    """Problems, parse errors and scopes for meta, the bad line at line 2, and a good scope after it."""
    d = read_lines([meta(total=3), line, *GOOD_TAIL])
    return d.problems, d.decoder.parse_errors, d.summary.scopes


@pytest.mark.parametrize(("line", "reason"), [
    (b"\x00\xff\xfe garbage \x89PNG\x1a\x0b", "invalid_record"),
    ('{"site": "a", "phase": "begin", "depth": 1, "ring": 1', "invalid_record"),
    (rec("a", "begin", 1, task_window_start="3"), "invalid_record"),
    (rec("a", "begin", 1, heap_end=1.5), "invalid_record"),
    (rec("a", "begin", 1, tensormap=None), "invalid_record"),
    ({k: v for k, v in rec("a", "begin", 1).items() if k != "heap_end"}, "invalid_record"),
    ({k: v for k, v in rec("a", "begin", 1).items() if k != "dep_pool_end"}, "invalid_record"),
    (rec("a", "middle", 1), "invalid_record"),
    (rec("a", "begin", 65), "depth_out_of_range"),
    (rec("a", "begin", -1, ring=0), "depth_out_of_range"),
    (rec("a", "begin", 1, ring=4), "ring_out_of_range"),
    (rec("a", "begin", 1, ring=-1), "ring_out_of_range"),
    (rec("a", "begin", 1, heap=(-5, 0)), "negative_counter"),
    ("", "blank_line"),
    ("[1, 2, 3]", "invalid_record"),
    (meta(), "metadata_again"),
], ids=["binary", "truncated", "str-int", "float", "null", "missing-heap_end", "missing-dep_pool_end",
        "bad-phase", "depth-65", "depth-neg", "ring-4", "ring-neg", "negative", "blank", "array", "meta-again"])
def test_bad_line_is_one_error_at_its_line_and_the_rest_is_read(line: str | bytes | dict[str, object],
                                                                reason: str) -> None:
    problems, errors, scopes = _bad(line)
    assert [(p.line, p.reason, p.severity) for p in problems] == [(2, reason, "error")]
    assert problems[0].message
    assert errors == 1
    assert scopes == 1


def test_depth_64_is_accepted() -> None:
    d = read_lines([meta(total=2), rec("a", "begin", 64), rec("a", "end", 64)])
    assert d.problems == [] and d.summary.scopes == 1 and d.summary.max_depth == 64


def test_ring_outside_a_shorter_metadata_array() -> None:
    d = read_lines([meta(task_window=[8, 8], heap=[64, 64], dep_pool=[4, 4], total=3),
                    rec("a", "begin", 2), *GOOD_TAIL])
    assert [(p.line, p.reason) for p in d.problems] == [(2, "ring_out_of_range")]
    assert "ring 2" in d.problems[0].message and "0..1" in d.problems[0].message
    assert d.summary.scopes == 1


def test_counter_going_backwards_is_an_error_and_the_ring_recovers() -> None:
    lines = [meta(total=6),
             rec("a", "begin", 1, tw=(0, 4)),
             rec("a", "end", 1, tw=(0, 2)),  # task_window_end went backwards: dropped
             rec("b", "begin", 1, tw=(4, 4)),
             rec("b", "end", 1, tw=(4, 9)),
             *GOOD_TAIL]
    d = read_lines(lines)
    assert [(p.line, p.reason) for p in d.problems] == [(3, "counter_backwards")]
    assert "task_window_end" in d.problems[0].message and "ring 1" in d.problems[0].message
    assert d.summary.scopes == 2  # b and z; a's begin was abandoned by b's begin


def test_one_corrupt_spike_does_not_poison_the_rest_of_the_ring() -> None:
    """A single record with a huge counter must not make every later record 'go backwards'."""
    lines = [meta(heap=1 << 20, total=8),
             rec("a", "begin", 1, heap=(0, 100)),
             rec("a", "end", 1, heap=(0, 10**15)),  # corrupt spike (accepted: it went forwards)
             rec("b", "begin", 1, heap=(100, 200)),  # backwards against the spike
             rec("b", "end", 1, heap=(100, 300)),
             rec("c", "begin", 1, heap=(300, 300)),
             rec("c", "end", 1, heap=(300, 400)),
             rec("z", "begin", 1, heap=(400, 400)),
             rec("z", "end", 1, heap=(400, 500))]
    d = read_lines(lines)
    assert [(p.line, p.reason) for p in d.errors] == [(4, "counter_backwards")]
    s = d.summary
    assert s.scopes == 3  # a (with the spike), c and z; b lost its begin
    assert s.unmatched_ends == 1


def test_unescaped_quote_in_site_is_repaired_with_a_warning() -> None:
    """The runtime writes ``site`` without JSON escaping; a file name with ``"`` must not lose its scopes."""
    bad_begin = rec("PLACEHOLDER", "begin", 1, tw=(0, 0))
    bad_end = rec("PLACEHOLDER", "end", 1, tw=(0, 3))
    raw = [json.dumps(r).replace("PLACEHOLDER", 'my"file.cpp:3') for r in (bad_begin, bad_end)]
    d = read_lines([meta(total=4), *raw, *GOOD_TAIL])
    assert d.errors == []
    # one warning per file (every record of that site has the problem), not a parse error
    assert [(p.line, p.reason, p.severity) for p in d.warnings] == [(2, "unescaped_site", "warning")]
    assert d.decoder.parse_errors == 0
    assert [r.site for r in d.records[:2]] == ['my"file.cpp:3'] * 2
    assert d.summary.scopes == 2 and d.summary.unmatched_ends == 0


def test_site_cut_inside_a_utf8_character_is_repaired() -> None:
    """The runtime cuts the basename to 31 bytes, which can split a multi-byte character."""
    name = ("é" * 20).encode()[:31] + b":7"  # ends with half of an 'é'
    lines: list[Line] = [meta(total=2),
             b'{"site": "' + name + b'", "phase": "begin", "depth": 1, "ring": 1, "task_window_start": 0, '
             b'"task_window_end": 0, "heap_start": 0, "heap_end": 0, "dep_pool_start": 1, "dep_pool_end": 1, '
             b'"tensormap": 0}',
             b'{"site": "' + name + b'", "phase": "end", "depth": 1, "ring": 1, "task_window_start": 0, '
             b'"task_window_end": 1, "heap_start": 0, "heap_end": 0, "dep_pool_start": 1, "dep_pool_end": 1, '
             b'"tensormap": 0}']
    d = read_lines(lines)
    assert d.errors == []
    assert d.summary.scopes == 1
    assert d.records[0].site.startswith("é" * 15) and d.records[0].site.endswith(":7")


def test_unrepairable_invalid_json_is_an_error_naming_the_line() -> None:
    problems, errors, scopes = _bad('{"site": "a", "phase": "begin", "depth": 1,, }')
    assert [(p.line, p.reason) for p in problems] == [(2, "invalid_record")]
    assert "invalid JSON" in problems[0].message
    assert errors == 1 and scopes == 1


def test_first_line_not_metadata_reads_the_records() -> None:
    d = read_lines([rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 2))])
    assert [(p.line, p.reason) for p in d.errors] == [(1, "no_metadata")]
    assert d.meta is None and len(d.records) == 2 and d.summary.scopes == 1


def test_first_line_invalid_json() -> None:
    d = read_lines(['{"version": 6, "fatal": fals', rec("a", "begin", 1), rec("a", "end", 1)])
    assert [(p.line, p.reason) for p in d.errors] == [(1, "invalid_json")]
    assert d.summary.scopes == 1


def test_metadata_with_wrong_types() -> None:
    d = read_lines([{"version": 6, "fatal": "no", "dropped": 0}, rec("a", "begin", 1)])
    assert [(p.line, p.reason) for p in d.errors] == [(1, "bad_metadata")]
    assert "fatal" in d.errors[0].message


def test_empty_file() -> None:
    d = read_bytes(b"")
    assert [(p.line, p.reason, p.severity) for p in d.problems] == [(0, "empty_file", "error")]
    assert d.decoder.parse_errors == 1


def test_metadata_only_is_a_warning() -> None:
    d = read_lines([meta(total=0)])
    assert [(p.line, p.reason, p.severity) for p in d.problems] == [(0, "metadata_only", "warning")]
    assert d.decoder.parse_errors == 0 and d.meta is not None


def test_crlf_line_endings_are_read_with_one_warning() -> None:
    lines = with_totals([rec("a", "begin", 1), rec("a", "end", 1, tw=(0, 2))])
    d = read_bytes(encode_lines(lines, newline=b"\r\n"))
    assert [(p.line, p.reason, p.severity) for p in d.problems] == [(1, "crlf", "warning")]
    assert d.decoder.parse_errors == 0 and d.summary.scopes == 1 and d.summary.complete


def test_crlf_split_between_chunks() -> None:
    data = encode_lines(with_totals([rec("a", "begin", 1), rec("a", "end", 1)]), newline=b"\r\n")
    cut = data.index(b"\r\n") + 1  # between \r and \n
    assert read_bytes(data, [cut]).items == read_bytes(data).items


@pytest.mark.parametrize("chunk", [1 << 16, 1 << 20, 3 << 20], ids=["64k", "1m", "3m"])
def test_line_over_1mib_is_skipped_at_any_chunk_size(chunk: int) -> None:
    long_site = "x" * (MAX_LINE + 10)
    data = encode_lines([meta(total=3), rec(long_site, "begin", 1), *GOOD_TAIL])
    dec = Decoder()
    items: list[object] = []
    held = 0
    for i in range(0, len(data), chunk):
        items.extend(dec.feed(data[i:i + chunk]))
        held = max(held, dec.pending)
    items.extend(dec.finish())
    problems = [i for i in items if isinstance(i, Problem)]
    assert [(p.line, p.reason) for p in problems] == [(2, "line_too_long")]
    assert [r.line for r in items if isinstance(r, Record)] == [3, 4]
    assert dec.parse_errors == 1
    assert held <= MAX_LINE + 1  # never holds more than one line's worth


def test_line_of_exactly_max_bytes_is_read() -> None:
    r = rec("s", "begin", 1)
    base = len(json.dumps(r))
    r["site"] = "s" * (MAX_LINE - base + 1)
    assert len(json.dumps(r)) == MAX_LINE
    d = read_lines([meta(total=1), r])
    assert d.errors == [] and len(d.records) == 1


def test_long_last_line_without_newline() -> None:
    data = encode_lines([meta(total=2), *GOOD_TAIL]) + b"x" * (MAX_LINE + 5)
    d = read_bytes(data, [len(data) - 10])
    assert [(p.line, p.reason) for p in d.problems] == [(4, "line_too_long")]
    assert d.summary.scopes == 1


def test_v5_full_ring_reads_as_empty_and_the_next_tail_is_not_backwards() -> None:
    """Equal raw offsets read as empty; the following real tail is lower, which is not an error."""
    lines = [meta(version=5, heap=100, total=4),
             rec("a", "begin", 1, heap=(0, 60)),  # tail 0, head 60
             rec("b", "begin", 2, ring=1, heap=(20, 20)),  # really full (tail 20, head 120): reads empty at 120
             rec("b", "end", 2, ring=1, heap=(40, 30)),  # tail 40, head 130: occupancy 90
             rec("a", "end", 1, heap=(50, 50))]  # head 150, empty
    d = read_lines(lines)
    assert d.problems == []
    assert [(r.heap_start, r.heap_end) for r in d.records] == [(0, 60), (120, 120), (40, 130), (150, 150)]
    assert d.summary.scopes == 2


# -- hostile input: nesting, numbers, metadata -------------------------------------------------

DEEP = b"[" * 1000 + b"]" * 1000


@pytest.mark.parametrize(("line", "reason"), [
    (DEEP, "invalid_record"),  # a bare array is not a record at its first byte
    (b'{"site": "a", "phase": "begin", "depth": 1, "x": ' + DEEP + b"}", "nested_too_deep"),
    (b'{"x": ' + b'{"y": ' * 1000 + b"1" + b"}" * 1000 + b"}", "nested_too_deep"),
], ids=["array", "in-a-record", "objects"])
def test_deeply_nested_json_in_a_record_is_one_error_at_its_line(line: bytes, reason: str) -> None:
    problems, errors, scopes = _bad(line)
    assert [(p.line, p.reason, p.severity) for p in problems] == [(2, reason, "error")]
    assert errors == 1 and scopes == 1


@pytest.mark.parametrize("first", [DEEP, b'{"version": 6, "x": ' + DEEP + b"}"], ids=["array", "in-metadata"])
def test_deeply_nested_metadata_line_is_one_error_and_the_records_are_read(first: bytes) -> None:
    d = read_lines([first, *GOOD_TAIL])
    assert [(p.line, p.reason) for p in d.errors] == [(1, "nested_too_deep")]
    assert d.meta is None and d.decoder.parse_errors == 1 and d.summary.scopes == 1


def test_deep_line_inside_a_batch_falls_back_to_line_by_line() -> None:
    good = [rec("a", "begin", 1, tw=(0, i)) for i in range(50)]
    deep = b'{"site": "a", "phase": "begin", "depth": 1, "x": ' + DEEP + b"}"
    data = encode_lines([meta(), *good[:25], deep, *good[25:]])
    dec = Decoder()
    items = dec.feed(data) + dec.finish()
    assert [(p.line, p.reason) for p in items if isinstance(p, Problem)] == [(27, "nested_too_deep")]
    assert dec.records == 50 and dec.parse_errors == 1


@pytest.mark.parametrize(("value", "words"), [
    (b"1e999", "out of range"), (b"-1e999", "out of range"), (b"NaN", "NaN"), (b"Infinity", "Infinity"),
    (b"-Infinity", "Infinity"), (b"2.5", "got `float`"), (b"1e3", "got `float`"),
    (str(1 << 63).encode(), "<= 9223372036854775807"), (b"9" * 40, "heap_end"),
], ids=["1e999", "-1e999", "nan", "inf", "-inf", "float", "exp", "2^63", "huge"])
def test_non_finite_or_non_integer_counter_is_an_error_at_its_line(value: bytes, words: str) -> None:
    line = json.dumps(rec("a", "begin", 1)).encode().replace(b'"heap_end": 0', b'"heap_end": ' + value)
    problems, errors, scopes = _bad(line)
    assert [(p.line, p.reason) for p in problems] == [(2, "invalid_record")]
    assert words in problems[0].message
    assert errors == 1 and scopes == 1


def test_largest_int64_counter_is_read() -> None:
    top = (1 << 63) - 1
    d = read_lines([meta(total=2), rec("a", "begin", 1, heap=(top - 9, top - 5)), rec("a", "end", 1, heap=(top, top))])
    assert d.problems == [] and d.records[-1].heap_end == top


@pytest.mark.parametrize(("key", "value", "words"), [
    ("dropped", -1, "dropped"), ("total", -3, "total"), ("heap_max", [-1, 1, 1, 1], "heap_max"),
    ("task_window_max", [4, 4, 4.5, 4], "task_window_max"), ("tensormap_max", -1, "tensormap_max"),
    ("version", "6", "version"), ("fatal", None, "fatal"), ("dropped", None, "dropped"), ("total", None, "total"),
    ("heap_max", None, "heap_max"), ("tensormap_max", None, "tensormap_max"), ("version", None, "version"),
    ("dropped", 1 << 64, "dropped"),
], ids=["dropped-neg", "total-neg", "cap-neg", "cap-float", "tm-neg", "version-str", "fatal-null", "dropped-null",
        "total-null", "caps-null", "tm-null", "version-null", "dropped-huge"])
def test_metadata_with_a_bad_value_is_unreadable_and_says_which(key: str, value: object, words: str) -> None:
    d = read_lines([{**meta(total=2), key: value}, *GOOD_TAIL])
    assert [(p.line, p.reason, p.severity) for p in d.problems] == [(1, "bad_metadata", "error")]
    assert words in d.problems[0].message and "unknown" in d.problems[0].message
    assert d.meta is None and d.decoder.parse_errors == 1 and d.summary.scopes == 1


def test_more_dropped_than_total_is_unreadable_metadata() -> None:
    d = read_lines([meta(total=2, dropped=3), *GOOD_TAIL])
    assert [(p.line, p.reason) for p in d.errors] == [(1, "bad_metadata")]
    assert "dropped 3 is more than total 2" in d.errors[0].message and d.meta is None
    assert read_lines([meta(total=3, dropped=3)]).meta is not None  # all dropped: read


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"1e999"])
def test_non_finite_number_in_the_metadata_is_an_error(value: bytes) -> None:
    first = json.dumps(meta(total=2)).encode().replace(b'"total": 2', b'"total": ' + value)
    d = read_lines([first, *GOOD_TAIL])
    assert [(p.line, p.reason) for p in d.errors] == [(1, "invalid_json")]
    assert d.meta is None and d.summary.scopes == 1


def test_utf8_bom_before_the_metadata_is_skipped_with_a_warning() -> None:
    data = b"\xef\xbb\xbf" + encode_lines([meta(total=2, fatal=True), *GOOD_TAIL])
    for cut in (1, 2, 3, 10):  # the mark itself split between chunks
        d = read_bytes(data, [cut])
        assert [(p.line, p.reason, p.severity) for p in d.problems] == [(1, "bom", "warning")]
        assert d.meta is not None and d.meta.fatal and d.meta.total == 2
        assert d.decoder.parse_errors == 0 and d.summary.complete


def test_bom_on_a_later_line_is_an_invalid_record() -> None:
    problems, errors, _ = _bad(b"\xef\xbb\xbf" + json.dumps(rec("a", "begin", 1)).encode())
    assert [(p.line, p.reason) for p in problems] == [(2, "invalid_record")] and errors == 1
