"""What a new user gives the commands, through the real command line (in-process): bad input gets one clear
line and the documented exit code, a file named on the command line is that one run, and runs whose folders
have one name are counted and told apart.  The files are copies of real runs (``tests/fixtures/inputs/``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

INPUTS = Path(__file__).resolve().parents[1] / "fixtures" / "inputs"
BAD = INPUTS / "bad"
BEFORE = INPUTS / "named" / "before" / "vector_default.jsonl"
AFTER = INPUTS / "named" / "after" / "vector_small.jsonl"
FOREIGN_LOG = INPUTS / "named" / "after" / "host.log"


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["metadata_only", "recordless"])
def test_a_file_without_records_is_never_a_completed_run_and_check_fails_it(cli: Any, case: str) -> None:
    path = BAD / case / "scope_stats" / "scope_stats.jsonl"
    f = cli("summary", "--format", "json", path).file()
    assert f["records"] == 0 and f["verdict"]["kind"] == "cut_short" and f["verdict"]["severity"] == "error"
    assert "completed" not in f["verdict"]["text"]
    r = cli("check", path)
    assert r.code == 1 and f"FAIL {path}" in r.out and f"ok {path}" not in r.out


def test_watch_once_on_a_path_that_does_not_exist_exits_2_with_one_line(cli: Any, tmp_path: Path) -> None:
    missing = tmp_path / "not-there"
    r = cli("watch", missing, "--once", "--events", "-")
    assert r.code == 2 and r.out == ""
    assert r.err.splitlines() == [f"ringtrace: {missing}: no such file or directory (watch --once reads what exists "
                                  "now)"]
    r = cli("watch", str(missing / "**" / "scope_stats.jsonl"), "--once", "--events", "-")
    assert r.code == 2 and r.err.splitlines() == [f"ringtrace: {missing}: no such directory (watch --once reads "
                                                  "what exists now)"]
    r = cli("watch", str(tmp_path / "*" / "x"), "--once", "--events", str(tmp_path / "ev.jsonl"))  # a folder that is
    assert r.code == 0, r.err  # there: read as it is (it may match later; a tree's link loops are never expanded)


@pytest.mark.parametrize("case", ["empty", "metadata_only", "recordless"])
def test_advise_on_input_without_evidence_prints_no_run_config(cli: Any, case: str) -> None:
    r = cli("advise", BAD / case)
    assert r.code == 2 and "RunConfig" not in r.out and r.out.strip() == ""
    assert "ringtrace: nothing to advise from" in r.err


def test_report_o_dash_writes_the_page_to_standard_output(cli: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("report", "-o", "-", BEFORE)
    assert r.code == 0 and r.out.startswith("<!DOCTYPE html>") and r.out.rstrip().endswith("</html>")
    assert "wrote" not in r.out and list(tmp_path.iterdir()) == []  # no file named "-"


def test_a_folder_of_jsonl_files_named_otherwise_is_told_which_and_how_to_read_them(cli: Any) -> None:
    folder = INPUTS / "other_names"
    r = cli("summary", folder)
    assert r.code == 2 and r.out == ""
    [line] = r.err.splitlines()
    assert f"{folder}: no scope_stats files in this directory" in line
    assert f"{folder / 'vector_default.jsonl'}, {folder / 'vector_tuned.jsonl'}" in line
    assert "name each as a PATH to read it" in line
    r = cli("summary", "--format", "json", *sorted(folder.iterdir()))  # what the message says: both read
    assert r.code == 0 and [f["records"] for f in r.files()] == [4, 4]


# -- named files ----------------------------------------------------------------------------------


def test_diff_of_two_named_files_compares_them_whatever_lies_beside_them(cli: Any) -> None:
    r = cli("diff", "--format", "json", BEFORE, AFTER)
    doc = r.json
    assert r.code == 0 and doc["unmatched"] == []
    [pair] = doc["pairs"]
    assert (pair["a"], pair["b"]) == (str(BEFORE), str(AFTER))
    dep = next(x for x in pair["rings"] if (x["ring"], x["resource"]) == (1, "dep_pool"))
    assert (dep["before"]["capacity"], dep["after"]["capacity"]) == (16384, 6)
    assert f"{FOREIGN_LOG}" in r.err and "not read" in r.err  # the foreign log is named, and left alone


def test_diff_of_two_named_files_gates_on_what_it_compared(cli: Any) -> None:
    r = cli("diff", "--fail-on-regression", "0.05", BEFORE, AFTER)
    assert r.code == 1 and "REGRESSION" in r.out and "unmatched" not in r.out  # dep pool use 0% -> 100%


def test_a_named_file_is_one_run_a_foreign_log_beside_it_is_not_read(cli: Any) -> None:
    r = cli("summary", "--format", "json", AFTER)
    assert r.code == 0 and [f["path"] for f in r.files()] == [str(AFTER)]
    assert r.file()["verdict"]["kind"] != "failed"


def test_a_named_file_takes_its_own_host_log_when_the_sizes_match(cli: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(AFTER, run / "vector_small.jsonl")  # the failed run's log beside a file of the same run: paired
    log = "\n".join(["Ring buffer sizes: task_window=[16384, 16384, 16384, 16384] heap=[268435456, 268435456, "
                     "268435456, 268435456] dep_pool=[16384, 6, 16384, 16384]", ""])
    (run / "host.log").write_text(log)
    f = cli("summary", "--format", "json", run / "vector_small.jsonl").file()
    assert f["host_log"]["path"] == str(run / "host.log")


# -- counts and names -----------------------------------------------------------------------------

SAME = INPUTS / "same_names"
RUN = "TestScopeStats_default_20261130_101210"


def test_advise_counts_every_run_given_though_their_folders_share_a_name(cli: Any) -> None:
    r = cli("advise", SAME)
    assert r.code == 0 and r.out.splitlines()[0] == "TestScopeStats_default: 5 run(s), measure; grouped by case name"
    [program] = cli("advise", "--format", "json", SAME).json["programs"]
    assert program["runs"] == 5


@pytest.mark.parametrize("command", ["summary", "check"])
def test_runs_whose_folders_share_a_name_are_told_apart_by_their_paths(cli: Any, command: str) -> None:
    r = cli(command, SAME)
    rows = [line.split()[0] for line in r.out.splitlines() if RUN in line and not line.startswith(("ok ", "FAIL "))]
    assert rows == [f"{p}/outputs/{RUN}" for p in "abcde"]


def test_the_report_tells_the_runs_apart(cli: Any) -> None:
    page = cli("report", "-o", "-", SAME).out
    for p in "abcde":
        assert f'"{p}/outputs/{RUN}"' in page
