"""``ringtrace diff``: two runs (files, or trees matched by labels) written by the simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ringtrace.cli import main
from ringtrace.demo import sim

KIB = 1024
BASE = sim.Scenario(name="diff", program="moe_layer", seed=11, loops=(4, 3), tasks=(0, 2, 3),
                    tensor_bytes=(1 * KIB, 4 * KIB), deps=(0, 2))


def caps(scn: sim.Scenario, ring: int, **kw: int) -> sim.Scenario:
    out = {}
    for key, value in kw.items():
        values = list(getattr(scn, key))
        values[ring] = value
        out[key] = tuple(values)
    return msgspec.structs.replace(scn, **out)


def l2(root: Path, run: str, scn: sim.Scenario) -> Path:
    path = root / "build_output" / run / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    sim.write_file(path, scn)
    return path


def l3(root: Path, run: str, ranks: list[sim.Scenario]) -> Path:
    out = root / "build_output" / run
    for n, scn in enumerate(ranks):
        d = out / "dfx_outputs" / f"rank{n}" / "d0"
        (d / "scope_stats").mkdir(parents=True)
        (d / "dispatch_program.json").write_text(json.dumps({"program": "moe_layer_0"}))
        sim.write_file(d / "scope_stats" / "scope_stats.jsonl", scn)
    return out


def diff(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, dict[str, Any]]:
    code = main(["diff", "--format", "json", *map(str, args)])
    return code, json.loads(capsys.readouterr().out)


def test_a_smaller_ring_before_and_after(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = l2(tmp_path, "moe_20261201_000001", BASE)
    b = l2(tmp_path, "moe_20261201_000002", caps(BASE, 2, heap_max=16 * KIB))
    code, obj = diff(capsys, a, b)
    assert code == 0 and obj["unmatched"] == []
    [pair] = obj["pairs"]
    assert set(pair) >= {"a", "b", "labels", "rings", "findings_added", "findings_removed"}
    assert (pair["a"], pair["b"]) == (str(a), str(b))
    heap2 = next(r for r in pair["rings"] if (r["ring"], r["resource"]) == (2, "heap"))
    before, after = heap2["before"], heap2["after"]
    assert set(before) >= {"capacity", "high_water", "alloc", "live_at_exit", "high_water_ratio"}
    assert (before["capacity"], after["capacity"]) == (BASE.heap_max[2], 16 * KIB)
    assert after["high_water_ratio"] > before["high_water_ratio"]
    assert after["alloc"] >= before["alloc"]  # same blocks; on the small ring the bytes skipped at its end count
    assert after["live_at_exit"] <= before["live_at_exit"]  # the small ring reclaims, the default one never does
    assert pair["scopes"]["before"] == pair["scopes"]["after"] > 0  # same program, same scopes
    # the table says the same in one screen
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "256.0M→16.0K" in out and "scopes" in out  # one row per ring and resource: compact cells


def test_fail_on_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = l2(tmp_path, "moe_20261201_000001", BASE)
    b = l2(tmp_path, "moe_20261201_000002", caps(BASE, 2, heap_max=16 * KIB))
    code, obj = diff(capsys, "--fail-on-regression", "0.05", a, b)
    assert code == 1 and any("ring 2 heap" in r for r in obj["pairs"][0]["regressions"])
    assert diff(capsys, "--fail-on-regression", "0.05", b, a)[0] == 0  # shrinking the ratio is no regression
    assert diff(capsys, "--fail-on-regression", "2", a, b)[0] == 0
    assert main(["diff", "--fail-on-regression", "-1", str(a), str(b)]) == 2


def test_findings_that_appear_and_disappear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = l2(tmp_path, "moe_20261201_000001", BASE)
    b = l2(tmp_path, "moe_20261201_000002", caps(BASE, 2, heap_max=4 * KIB))  # wedges
    _, obj = diff(capsys, a, b)
    [pair] = obj["pairs"]
    assert "wedged" in {f["rule"] for f in pair["findings_added"]}
    assert any("B wedged" in n for n in pair["notes"])
    _, back = diff(capsys, b, a)
    assert "wedged" in {f["rule"] for f in back["pairs"][0]["findings_removed"]}


def test_trees_are_matched_by_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = caps(BASE, 2, heap_max=16 * KIB)
    a = l3(tmp_path / "a", "moe_l3_20261201_000001", [BASE, BASE])
    b = l3(tmp_path / "b", "moe_l3_20261201_000002", [small, BASE, BASE])
    code, obj = diff(capsys, a, b)
    assert code == 0
    pairs = {(p["labels"]["rank"], Path(p["a"]).parts[-4], Path(p["b"]).parts[-4]) for p in obj["pairs"]}
    assert pairs == {("0", "rank0", "rank0"), ("1", "rank1", "rank1")}
    assert obj["unmatched"] == [f"B: {b / 'dfx_outputs' / 'rank2' / 'd0' / 'scope_stats' / 'scope_stats.jsonl'}"]
    rank0 = next(p for p in obj["pairs"] if p["labels"]["rank"] == "0")
    heap2 = next(r for r in rank0["rings"] if (r["ring"], r["resource"]) == (2, "heap"))
    assert heap2["after"]["capacity"] == 16 * KIB


def test_what_cannot_be_compared_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = l2(tmp_path, "moe_20261201_000001", BASE)
    other = msgspec.structs.replace(BASE, program="attention", seed=12)
    b = l2(tmp_path, "attention_20261201_000002", other)
    _, obj = diff(capsys, a, b)
    assert any("different programs" in n for n in obj["pairs"][0]["notes"])
    v4 = l2(tmp_path, "moe_20261201_000003", msgspec.structs.replace(BASE, version=4))
    _, obj = diff(capsys, v4, a)
    [pair] = obj["pairs"]
    dep = [r for r in pair["rings"] if r["resource"] == "dep_pool"]
    assert dep and all(r["before"] is None and r["after"] is not None for r in dep)  # used on one side only
    assert any("version 4" in n for n in pair["notes"])
    dropped = l2(tmp_path, "moe_20261201_000004", msgspec.structs.replace(BASE, drop_rate=0.2))
    _, obj = diff(capsys, a, dropped)
    assert any("dropped" in n and "lower bounds" in n for n in obj["pairs"][0]["notes"])
    assert main(["diff", str(a), str(tmp_path / "missing")]) == 2


def test_the_diff_table_has_one_line_per_ring_and_resource_at_100_columns() -> None:
    import os
    import subprocess
    import sys

    samples = Path(__file__).parents[1] / "fixtures"
    a = samples / "samples" / "outputs" / "TestBenchmarkBgemm_Case0_20261130_101845"
    b = samples / "sizing" / "bgemm" / "outputs" / "TestBenchmarkBgemm_Case0_20261130_100400"
    r = subprocess.run([sys.executable, "-m", "ringtrace", "diff", str(a), str(b)], capture_output=True, text=True,
                       env={**os.environ, "COLUMNS": "100"}, timeout=60)
    rows = [line for line in r.stdout.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == 6 and all(len(line) <= 100 for line in rows), r.stdout  # rings 0-1, three resources each
