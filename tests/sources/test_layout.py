"""Paths -> sources: the L2, L3 and scene-test layouts of the format doc, labels, discovery."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath

import pytest

from ringtrace.model.records import Labels
from ringtrace.sources.paths import (
    Candidate,
    distinct_names,
    find_inputs,
    find_sources,
    is_scope_stats,
    labels_for,
    read_program,
    source_labels,
)
from tests._support.samples import SAMPLES


@pytest.mark.parametrize(("path", "labels"), [
    ("/w/prog_20261130/dfx_outputs/scope_stats/scope_stats.jsonl", Labels(run="prog_20261130")),
    ("/o/nested_l3_1/dfx_outputs/rank12/d3/scope_stats/scope_stats.jsonl",
     Labels(run="nested_l3_1", rank="12", dispatch="3")),
    ("outputs/TestX_20261130/scope_stats/scope_stats.jsonl", Labels(run="TestX_20261130")),
    ("build_output/r/dfx_outputs/rank0/d0/scope_stats/other.jsonl", Labels(run="r", rank="0", dispatch="0")),
    ("dfx_outputs/scope_stats/scope_stats.jsonl", Labels()),  # run from inside the work dir
    ("scope_stats.jsonl", Labels()),
    ("/data/mycopy.jsonl", Labels(run="data")),  # a plain file: its folder
    ("/o/r/dfx_outputs/card_d3/rank0/scope_stats/scope_stats.jsonl", Labels(run="rank0")),  # not rank/d order
])
def test_labels_for(path: str, labels: Labels) -> None:
    assert labels_for(PurePath(path)) == labels


@pytest.mark.parametrize(("path", "yes"), [
    ("a/scope_stats/scope_stats.jsonl", True),
    ("a/scope_stats/other.jsonl", True),
    ("a/b/scope_stats.jsonl", True),
    ("a/b/other.jsonl", False),
    ("a/scope_stats/scope_stats.jsonl.tmp", False),
    ("a/scope_stats/scope_stats.html", False),
])
def test_is_scope_stats(path: str, yes: bool) -> None:
    assert is_scope_stats(PurePath(path)) is yes


def test_find_sources_on_the_sample_tree() -> None:
    files, errors = find_sources([str(SAMPLES)])
    assert errors == []
    rel = [f.relative_to(SAMPLES).as_posix() for f in files]
    assert len(rel) == 8 and all(r.endswith("scope_stats/scope_stats.jsonl") for r in rel)
    l3 = [r for r in rel if "rank" in r]
    assert l3 == ["build_output/nested_l3_20261130_102011/dfx_outputs/rank0/d0/scope_stats/scope_stats.jsonl",
                  "build_output/nested_l3_20261130_102011/dfx_outputs/rank1/d1/scope_stats/scope_stats.jsonl"]


def test_ranks_and_dispatches_sort_numerically(tmp_path: Path) -> None:
    for rank, disp in [(10, 0), (2, 11), (2, 3)]:
        d = tmp_path / "run" / "dfx_outputs" / f"rank{rank}" / f"d{disp}" / "scope_stats"
        d.mkdir(parents=True)
        (d / "scope_stats.jsonl").write_text("{}\n")
    files, _ = find_sources([str(tmp_path)])
    assert [(f.parts[-4], f.parts[-3]) for f in files] == [("rank2", "d3"), ("rank2", "d11"), ("rank10", "d0")]


def test_find_sources_errors_and_dedup(tmp_path: Path) -> None:
    (tmp_path / "empty_dir").mkdir()
    f = tmp_path / "x.jsonl"
    f.write_text("")
    files, errors = find_sources([str(tmp_path / "missing"), str(tmp_path / "empty_dir"), str(f), str(f),
                                  str(tmp_path / "." / "x.jsonl")])
    assert files == [f]
    assert errors == [f"{tmp_path / 'missing'}: no such file or directory",
                      f"{tmp_path / 'empty_dir'}: no scope_stats files in this directory "
                      "(looked for */scope_stats/*.jsonl)"]


def test_fifo_is_not_a_regular_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    files, errors = find_sources([str(fifo)])
    assert files == [] and errors == [f"{fifo}: not a regular file or directory"]


@pytest.mark.parametrize(("content", "program"), [
    ({"program": "moe_layer"}, "moe_layer"),
    ({"name": "attn"}, "attn"),
    ("plain_string", "plain_string"),
    ({"other": 1}, ""),
    (None, ""),
])
def test_read_program(tmp_path: Path, content: object, program: str) -> None:
    d = tmp_path / "rank0" / "d1"
    (d / "scope_stats").mkdir(parents=True)
    target = d / "scope_stats" / "scope_stats.jsonl"
    target.write_text("")
    if content is not None:
        (d / "dispatch_program.json").write_text(json.dumps(content))
    assert read_program(target) == program


def test_broken_dispatch_program_is_ignored(tmp_path: Path) -> None:
    d = tmp_path / "run" / "dfx_outputs" / "rank0" / "d1"
    (d / "scope_stats").mkdir(parents=True)
    target = d / "scope_stats" / "scope_stats.jsonl"
    (d / "dispatch_program.json").write_bytes(b"{not json")
    assert source_labels(target) == Labels(run="run", rank="0", dispatch="1", program="")
    (d / "dispatch_program.json").write_text('{"program": "p"}')
    assert source_labels(target) == Labels(run="run", rank="0", dispatch="1", program="p")


# -- find_inputs: scope_stats files, *.log files under directories, PATHs that may be host logs -----


def test_find_inputs_walks_once_for_files_and_logs() -> None:
    found = find_inputs([str(SAMPLES)])
    assert found.errors == [] and found.empty_dirs == [] and found.candidates == []
    assert found.files == find_sources([str(SAMPLES)])[0]
    assert [p.relative_to(SAMPLES).as_posix() for p in found.logs] == [
        "failed/HeapRingDeadlock/host.log", "failed/NestedScopes_window4_flow_control_deadlock/host.log",
        "failed/VectorExample_dep_pool4/host.log", "failed/VectorExample_heap128k_abort/host.log"]
    only_log = find_inputs([str(SAMPLES / "failed/VectorExample_dep_pool4")])
    assert only_log.files == [] and only_log.empty_dirs == [str(SAMPLES / "failed/VectorExample_dep_pool4")]
    assert [p.name for p in only_log.logs] == ["host.log"]


def test_find_inputs_sorts_given_files_by_name_and_first_bytes(tmp_path: Path) -> None:
    named = {"a.jsonl": b"", "run.txt": b'\xef\xbb\xbf  {"version": 6}\n', "host.log": b"[INFO] hello\n",
             "meta.log": b'{"version": 6}\n', "blob.bin": b"\x00\x01", "empty": b""}
    for name, data in named.items():
        (tmp_path / name).write_bytes(data)
    found = find_inputs([str(tmp_path / n) for n in named] + [str(tmp_path / "host.log")])
    assert found.files == [tmp_path / "a.jsonl", tmp_path / "run.txt"]  # by suffix; a JSON object despite a BOM
    assert found.candidates == [Candidate(tmp_path / "host.log"), Candidate(tmp_path / "meta.log", json=True),
                                Candidate(tmp_path / "blob.bin"), Candidate(tmp_path / "empty", empty=True)]
    assert found.logs == [] and found.errors == []


def test_find_inputs_errors_name_the_path(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    found = find_inputs([str(tmp_path / "missing"), str(fifo), str(tmp_path)])
    assert found.errors == [f"{tmp_path / 'missing'}: no such file or directory",
                            f"{fifo}: not a regular file or directory"]
    assert found.logs == [] and found.empty_dirs == [str(tmp_path)]  # a FIFO named like a log is never opened


def test_distinct_names_use_the_shortest_tail_of_the_folders_that_tells_them_apart() -> None:
    folders = [PurePath("/x/a/outputs/T_1"), PurePath("/x/b/outputs/T_1"), PurePath("/y/outputs/U_2"),
               PurePath("/x/a/outputs/T_1")]
    names = ["T_1/rank0/d0", "T_1/rank0/d0", "U_2", "T_1/rank1/d1"]
    assert distinct_names(names, folders) == ["a/outputs/T_1/rank0/d0", "b/outputs/T_1/rank0/d0", "U_2",
                                              "T_1/rank1/d1"]
    assert distinct_names(["T", "T"], [PurePath("/s/T"), PurePath("/s/T")]) == ["T", "T"]  # one folder: one run
