"""Golden tests: ``ringtrace summary`` on every case under ``tests/golden/``.

Layout: ``tests/golden/<case>/input/...`` is a scope_stats tree (real sample files copied from
``tests/fixtures/samples`` with their L2/L3/scene-test layout, plus small synthetic files for v4,
v5, v7 and bad lines); ``expected.json`` is the exact ``ringtrace summary --format json .`` output
run inside ``input/`` (so paths are relative), and ``expected.txt`` the table.

Host-log cases (``hostlog_*``) hold a runtime host log beside (or instead of) the records and an
``args.json``: the summary's arguments instead of ``.`` (e.g. ``["--host-log", "host.log", "."]``);
``expected_check.txt`` is ``ringtrace check`` with the same arguments, its exit code on the first line.

Every exporter's output is golden too (``tests/_support/golden.py`` makes them and says what it
normalises: the wall clock and the versions): ``expected.events.jsonl`` (the events file),
``expected.prom`` (the Prometheus exposition), ``expected.perfetto.txt`` (the Perfetto trace as text) and
``expected.otlp.json`` (the OTLP export requests as JSON); the whole real runs of :data:`WHOLE_RUNS`
have no trace or span golden (megabytes each: their events and metrics are golden, and the smaller
cases cover every kind of slice and span).

Regenerate after an intended change with one command (``tests/golden/README.md``)::

    make golden        # UPDATE_GOLDEN=1 .venv/bin/pytest -q tests/test_golden.py

and review the diff by hand against the raw lines before committing: the numbers must follow the
issue's formulas (``high_water = end.R_end - begin.R_start``, ``live_at_exit = end.R_end -
end.R_start``, ``alloc = end.R_end - begin.R_end``), not just what the code prints.  Two guards
keep that honest: :func:`test_expected_figures_match_a_naive_reader` recomputes every ring figure
of the expected files with a naive ``json.loads`` reader, and the ``test_hand_checked_*`` tests pin
figures checked by hand against the raw lines.
"""

from __future__ import annotations

import functools
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from tests._support.golden import EXPORTERS, exporter_outputs

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.name for p in GOLDEN.iterdir() if (p / "input").is_dir())
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def case_args(case: str) -> list[str]:
    args = GOLDEN / case / "args.json"
    return list(json.loads(args.read_text())) if args.exists() else ["."]


HOSTLOG_CASES = [c for c in CASES if (GOLDEN / c / "args.json").exists()]
WHOLE_RUNS = frozenset({"l3_nested_two_ranks", "scene_bgemm", "scene_nested_small", "scene_paged_attention_tight"})
"""Cases of whole real runs (hundreds of scopes): their Perfetto text and OTLP JSON run to megabytes, so
only their events and metrics are golden."""
EXPORTER_CASES = [(c, x) for c in CASES for x in EXPORTERS
                  if c not in WHOLE_RUNS or x in ("events.jsonl", "prom")]


def run_summary(case: str, fmt: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                command: str = "summary") -> tuple[int, str, str]:
    monkeypatch.chdir(GOLDEN / case / "input")
    for var in ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "TERM"):
        monkeypatch.delenv(var, raising=False)
    code = main([command, *(["--format", fmt] if command == "summary" else []), *case_args(case)])
    out, err = capsys.readouterr()
    return code, out, err


def _check(path: Path, actual: str) -> None:
    if UPDATE:
        path.write_text(actual)
        return
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1 and review it"
    assert actual == path.read_text(), f"{path} differs (UPDATE_GOLDEN=1 regenerates it; review the diff)"


@pytest.mark.parametrize("case", CASES)
def test_summary_json(case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_summary(case, "json", capsys, monkeypatch)
    assert code == 0, err
    doc = json.loads(out)  # exactly one JSON document on stdout
    assert list(doc) == ["files"] and doc["files"]
    if UPDATE:
        (GOLDEN / case / "expected.json").write_text(json.dumps(doc, indent=1) + "\n")
        return
    expected = json.loads((GOLDEN / case / "expected.json").read_text())
    assert doc == expected


@pytest.mark.parametrize("case", CASES)
def test_summary_table(case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_summary(case, "table", capsys, monkeypatch)
    assert code == 0
    assert "\x1b[" not in out  # no colour codes when not on a terminal
    _check(GOLDEN / case / "expected.txt", out)


@functools.cache
def _exported(case: str) -> dict[str, str]:
    return exporter_outputs(GOLDEN / case, case_args(case), [x for c, x in EXPORTER_CASES if c == case])


@pytest.mark.parametrize(("case", "exporter"), EXPORTER_CASES)
def test_exporter_output(case: str, exporter: str) -> None:
    """The events file, the Prometheus exposition, the Perfetto trace and the OTLP requests of the case."""
    _check(GOLDEN / case / f"expected.{exporter}", _exported(case)[exporter])


def test_every_exporter_golden_is_made_by_the_test() -> None:
    """No stale expected file: each one is compared by :func:`test_exporter_output` (a case left out keeps none)."""
    made = {GOLDEN / c / f"expected.{x}" for c, x in EXPORTER_CASES}
    found = {p for x in EXPORTERS for p in GOLDEN.glob(f"*/expected.{x}")}
    assert found <= made, sorted(str(p) for p in found - made)


@pytest.mark.parametrize("case", HOSTLOG_CASES)
def test_check_with_host_log(case: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run_summary(case, "", capsys, monkeypatch, "check")
    _check(GOLDEN / case / "expected_check.txt", f"exit {code}\n{out}")


# -- the expected files against an independent, naive reading of the raw lines -----------------


def naive(path: Path) -> dict[str, Any]:
    """The guide's snippet, extended to every resource: json.loads each line, pair by depth.

    Only valid for files without drops, bad lines or wrapped heaps (the real samples).
    """
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    meta, records = lines[0], lines[1:]
    open_by_depth: dict[int, dict[str, Any]] = {}
    best: dict[tuple[int, str, str], tuple[int, str]] = {}
    scopes: dict[int, int] = defaultdict(int)
    for r in records:
        if r["phase"] == "begin":
            assert r["depth"] not in open_by_depth
            open_by_depth[r["depth"]] = r
            continue
        b = open_by_depth.pop(r["depth"])
        assert b["site"] == r["site"]
        scopes[r["ring"]] += 1
        for res in ("task_window", "heap", "dep_pool"):
            figures = {"high_water": r[f"{res}_end"] - b[f"{res}_start"],
                       "live_at_exit": r[f"{res}_end"] - r[f"{res}_start"],
                       "alloc": r[f"{res}_end"] - b[f"{res}_end"]}
            for name, value in figures.items():
                key = (r["ring"], res, name)
                if key not in best or value > best[key][0]:
                    best[key] = (value, r["site"])
    tm = max(records, key=lambda r: r["tensormap"])  # max() keeps the first of equal values
    rings = []
    for ring in sorted(scopes):
        for res in ("task_window", "heap", "dep_pool"):
            cap = meta[f"{res}_max"][ring]
            hw, hw_site = best[(ring, res, "high_water")]
            rings.append({"ring": ring, "resource": res, "capacity": cap, "high_water": hw,
                          "high_water_site": hw_site, "high_water_ratio": round(hw / cap, 6),
                          "live_at_exit": best[(ring, res, "live_at_exit")][0],
                          "alloc": best[(ring, res, "alloc")][0], "scopes": scopes[ring]})
    wedged = sorted(open_by_depth.values(), key=lambda r: r["depth"])
    return {"records": len(records), "scopes": sum(scopes.values()), "rings": rings,
            "tensormap": {"capacity": meta["tensormap_max"], "peak": tm["tensormap"], "peak_site": tm["site"]},
            "wedged": [(w["site"], w["depth"], w["ring"]) for w in wedged],
            "complete": len(records) == meta["total"] - meta["dropped"]}


REAL_CASES = [c for c in CASES if c.startswith(("l2_", "l3_", "scene_"))]


@pytest.mark.parametrize("case", REAL_CASES)
def test_expected_figures_match_a_naive_reader(case: str) -> None:
    expected = json.loads((GOLDEN / case / "expected.json").read_text())
    for f in expected["files"]:
        model = naive(GOLDEN / case / "input" / f["path"])
        assert f["records"] == model["records"] and f["scopes"] == model["scopes"]
        assert f["complete"] == model["complete"]
        assert [{k: r[k] for k in model["rings"][0]} for r in f["rings"]] == model["rings"] if model["rings"] \
            else f["rings"] == []
        assert f["tensormap"] == model["tensormap"]
        assert [(w["site"], w["depth"], w["ring"]) for w in f["wedged"]] == model["wedged"]


def test_every_real_sample_has_a_golden_case() -> None:
    samples = Path(__file__).parent / "fixtures" / "samples"
    golden = {p.read_bytes() for c in REAL_CASES for p in (GOLDEN / c / "input").rglob("*.jsonl")}
    for sample in samples.rglob("*.jsonl"):
        assert sample.read_bytes() in golden, f"{sample} has no golden case"


# -- figures checked by hand against the raw lines ---------------------------------------------


def _file(case: str, index: int = 0) -> dict[str, Any]:
    f: dict[str, Any] = json.loads((GOLDEN / case / "expected.json").read_text())["files"][index]
    return f


def _ring(f: dict[str, Any], ring: int, resource: str) -> dict[str, Any]:
    return next(r for r in f["rings"] if (r["ring"], r["resource"]) == (ring, resource))


def test_hand_checked_bgemm() -> None:
    f = _file("scene_bgemm")
    assert (f["records"], f["total"], f["scopes"], f["complete"]) == (502, 502, 251, True)
    assert f["labels"]["run"] == "TestBenchmarkBgemm_Case0_20261130_101845"
    heap = _ring(f, 1, "heap")
    # last bgemm_orch.cpp:82 scope: begin line 502 heap_start 0, end line 503 heap 0/131072000
    assert heap["high_water"] == 131072000 and heap["live_at_exit"] == 131072000
    assert heap["high_water_ratio"] == round(131072000 / 268435456, 6)  # 0.488281
    assert heap["alloc"] == 524288  # each scope allocates 512 KiB: 131072000 - 130547712
    assert _ring(f, 1, "task_window")["high_water"] == 1000  # task_window_end 1000 at the last end
    assert _ring(f, 1, "dep_pool")["high_water"] == 750  # dep_pool_end 751 - start 1
    assert f["tensormap"] == {"capacity": 65536, "peak": 250, "peak_site": "bgemm_orch.cpp:82"}


def test_hand_checked_scope_stats_default() -> None:
    f = _file("scene_scope_stats_default")
    # line 4 end example_orchestration.cpp:77: task 0/4 heap 0/196608 dep 1/7, begin line 3 all 0 (dep 1/1)
    assert (_ring(f, 1, "heap")["high_water"], _ring(f, 1, "heap")["alloc"]) == (196608, 196608)
    assert (_ring(f, 1, "dep_pool")["high_water"], _ring(f, 1, "dep_pool")["alloc"]) == (6, 6)
    # line 5 root end: task 0/1 heap 0/65536
    assert (_ring(f, 0, "heap")["high_water"], _ring(f, 0, "heap")["high_water_site"]) == (65536, "(unknown):0")
    assert f["tensormap"]["peak"] == 1 and f["findings"] == []


def test_hand_checked_flow_control_deadlock() -> None:
    f = _file("l2_flow_control_deadlock")
    assert (f["records"], f["scopes"], f["rings"], f["complete"], f["fatal"]) == (5, 0, [], True, False)
    assert [(w["line"], w["depth"], w["ring"]) for w in f["wedged"]] == [(2, 0, 0), (3, 1, 1), (4, 2, 2), (5, 3, 3),
                                                                       (6, 4, 3)]
    assert f["wedged"][-1]["site"] == "nested_dummy_small_orch.cpp:75"
    assert f["findings"][0]["rule"] == "wedged" and "orch_error_code=3 FLOW_CONTROL_DEADLOCK" in \
        f["findings"][0]["message"]


def test_hand_checked_heap_ring_deadlock() -> None:
    f = _file("l2_heap_ring_deadlock")
    assert (f["records"], f["total"], f["scopes"], f["wedged"]) == (1, 1, 0, [
        {"site": "(unknown):0", "depth": 0, "ring": 0, "line": 2}])
    assert f["labels"]["run"] == "HeapRingDeadlock"


def test_hand_checked_paged_attention_tight() -> None:
    f = _file("scene_paged_attention_tight")
    tw = _ring(f, 2, "task_window")
    # lines 12-13, paged_attention_orch.cpp:177: begin task 1/16, end 9/20 -> 20 - 1 = 19 of 16 slots
    assert (tw["capacity"], tw["high_water"], tw["high_water_ratio"]) == (16, 19, 1.1875)
    assert tw["live_at_exit"] == 15  # lines 10-11: end task 1/16
    assert tw["alloc"] == 4
    assert (f["records"], f["scopes"], f["unmatched_begins"], f["unmatched_ends"]) == (1984, 992, 0, 0)
    assert "pinned" not in {x["rule"] for x in f["findings"]}


def test_hand_checked_l3_labels_and_tight_rank() -> None:
    rank0, rank1 = _file("l3_nested_two_ranks", 0), _file("l3_nested_two_ranks", 1)
    assert rank0["labels"] == {"run": "nested_l3_20261130_102011", "rank": "0", "dispatch": "0", "program": ""}
    assert rank1["labels"] == {"run": "nested_l3_20261130_102011", "rank": "1", "dispatch": "1", "program": ""}
    assert _ring(rank1, 3, "task_window")["capacity"] == 16 and _ring(rank0, 3, "task_window")["capacity"] == 16384
    assert rank1["max_depth"] == 4 and rank1["tensormap"]["peak_site"] == "nested_dummy_small_orch.cpp:75"


def test_hand_checked_v4_wrapped_heap() -> None:
    f = _file("v4_wrapped_heap")
    assert f["version"] == 4 and {r["resource"] for r in f["rings"]} == {"task_window", "heap"}
    heap = _ring(f, 1, "heap")
    # line 6 end raw heap 600/300 of 1000 wraps: head 700 + 600 = 1300, tail 1300 - 700 = 600;
    # scope wrap_orch.cpp:20 (begin 600/700): high_water 700, live 700, alloc 600. The first scope
    # (0/0 -> 0/700) already reached 700 everywhere, so it keeps the sites.
    assert (heap["high_water"], heap["high_water_site"], heap["live_at_exit"], heap["alloc"]) == \
        (700, "wrap_orch.cpp:10", 700, 700)
    tw = _ring(f, 1, "task_window")
    assert (tw["high_water"], tw["high_water_site"], tw["alloc"]) == (5, "wrap_orch.cpp:20", 4)
    assert f["tensormap"] == {"capacity": 100, "peak": 5, "peak_site": "wrap_orch.cpp:20"}


def test_hand_checked_v5_dropped() -> None:
    f = _file("v5_dropped")
    assert (f["records"], f["total"], f["dropped"], f["complete"]) == (9, 11, 2, True)
    # line 5 re-begins drop_orch.cpp:22 (its end was dropped): line 4 is an unmatched begin; line 7 ends
    # drop_orch.cpp:33 whose begin was dropped; line 8 begins at depth 1 and closes drop_orch.cpp:11
    assert (f["scopes"], f["unmatched_begins"], f["unmatched_ends"]) == (3, 2, 1)
    heap2 = _ring(f, 2, "heap")
    # line 6 raw 3072/1024 of 4096: head 3072 + 2048 = 5120, tail 3072; begin line 5 tail 2048 head 3072
    assert (heap2["high_water"], heap2["live_at_exit"], heap2["alloc"]) == (3072, 2048, 2048)
    assert [x["rule"] for x in f["findings"]] == ["dropped"]


def test_hand_checked_bad_lines() -> None:
    f = _file("bad_lines")
    assert (f["records"], f["parse_errors"], f["complete"], f["scopes"]) == (4, 3, False, 2)
    assert [(p["line"], p["reason"]) for p in f["problems"]] == [
        (1, "crlf"), (3, "unescaped_site"), (4, "invalid_record"), (6, "ring_out_of_range"),
        (7, "depth_out_of_range")]
    assert _ring(f, 1, "heap")["high_water_site"] == 'my"file.cpp:3'
    assert f["labels"] == {"run": "badrun_20261201_000000", "rank": "3", "dispatch": "2", "program": "bad_lines_prog"}


def test_hand_checked_v7_task_records() -> None:
    f = _file("v7_task_records")
    assert (f["version"], f["records"], f["scopes"], f["complete"]) == (7, 4, 2, True)
    tw = _ring(f, 1, "task_window")
    assert (tw["high_water"], tw["live_at_exit"], tw["alloc"]) == (3, 2, 2)
    assert _ring(f, 0, "heap")["high_water_site"] == "<root>"
    assert [(p["line"], p["reason"]) for p in f["problems"]] == [(1, "newer_version"), (3, "task_records")]
