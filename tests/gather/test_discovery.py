"""Host logs found without ``--host-log``, a host log given as PATH, folders holding only a log, and the
rule that a log is only ever paired with a file of its own run folder (never another run's).

Real files: ``tests/fixtures/samples/failed`` (runs with both a file and a log) and
``tests/fixtures/discovery/vector/outputs`` (the sizing runs of the runtime's vector example, laid out as
the scene tests lay them out: ``..._100300`` and ``..._100700`` failed and left only ``host.log``,
``..._100600`` completed and left only its scope_stats file).  ``..._100700``'s log says ``Heap ring 1:
... size=196607`` and ``..._100600``'s metadata ``heap_max[1] = 196608``: two runs one byte apart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from ringtrace.gather.pairing import contradiction, match_logs
from ringtrace.hostlog.parse import parse_host_log
from ringtrace.model.records import Deadlock, HostLog, Meta, RingSizes
from tests._support.samples import SAMPLES
from tests._support.scope_stats import encode_lines, meta, rec

FLOW_DIR = SAMPLES / "failed/NestedScopes_window4_flow_control_deadlock"
HEAP_DIR = SAMPLES / "failed/HeapRingDeadlock"
ABORT_LOG = SAMPLES / "failed/VectorExample_heap128k_abort/host.log"
VECTOR = Path(__file__).parents[1] / "fixtures" / "discovery" / "vector" / "outputs"
DEP_RUN = VECTOR / "TestVectorExample_default_20261130_100300"  # failed: orch_error_code=4, host.log only
DONE_RUN = VECTOR / "TestVectorExample_default_20261130_100600"  # completed with heap[1] = 196608, file only
HEAP_RUN = VECTOR / "TestVectorExample_default_20261130_100700"  # failed at heap[1] = 196607, host.log only
STATS = Path("dfx_outputs/scope_stats/scope_stats.jsonl")


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


# -- a folder holding only a host log is a run ---------------------------------------------------


def test_summary_of_a_folder_holding_only_host_log(cli: Any) -> None:
    r = cli("summary", "--format", "json", DEP_RUN)
    assert r.code == 0, r.err
    assert list(r.json) == ["files"]
    (f,) = r.files()
    assert (f["path"], f["records"], f["version"]) == (None, 0, None)
    assert f["labels"]["run"] == "TestVectorExample_default_20261130_100300"
    assert f["host_log"]["path"] == str(DEP_RUN / "host.log")
    assert (f["host_log"]["orch_error_code"], f["host_log"]["error_name"]) == (4, "DEP_POOL_OVERFLOW")
    assert [x["rule"] for x in f["findings"]] == ["failed"]
    assert "no scope_stats files" not in r.err
    r = cli("check", DEP_RUN)
    assert r.code == 1 and r.out.startswith(f"FAIL (no scope_stats file; host log {DEP_RUN / 'host.log'})")
    assert "orch_error_code=4 DEP_POOL_OVERFLOW" in r.out


def test_a_tree_of_scene_runs_reports_the_log_only_runs_beside_the_completed_one(cli: Any) -> None:
    r = cli("summary", "--format", "json", VECTOR)
    assert r.code == 0, r.err
    by_run = {f["labels"]["run"]: f for f in r.files()}
    assert sorted(by_run) == sorted(p.name for p in VECTOR.iterdir())
    done = by_run[DONE_RUN.name]
    assert done["path"] == str(DONE_RUN / "scope_stats/scope_stats.jsonl") and done["host_log"] is None
    assert by_run[HEAP_RUN.name]["path"] is None
    assert by_run[HEAP_RUN.name]["host_log"]["requested_bytes"] == 65536
    assert by_run[DEP_RUN.name]["host_log"]["orch_error_code"] == 4
    assert r.err == ""  # each log lies in a run folder of its own: nothing to explain
    assert cli("check", VECTOR).code == 1


def test_a_passing_run_known_only_from_its_log(cli: Any, tmp_path: Path) -> None:
    run = tmp_path / "outputs" / "TestOk_case_20261201_120000"
    run.mkdir(parents=True)
    (run / "host.log").write_text("[driver] run status: ok (0.04s)\n")
    r = cli("summary", "--format", "json", tmp_path)
    assert r.code == 0, r.err
    (f,) = r.files()
    assert f["path"] is None and f["labels"]["run"] == "TestOk_case_20261201_120000"
    assert f["host_log"]["orch_error_code"] is None and f["host_log"]["run_status"] == ["ok (0.04s)"]
    assert f["findings"] == []
    r = cli("summary", tmp_path)
    assert "no failure reported" in r.out
    r = cli("check", tmp_path)
    assert r.code == 0 and r.out.startswith("ok (no scope_stats file; host log ")


def test_a_folder_with_a_log_that_is_no_host_log_is_still_no_run(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "build.log").write_text("cc -O2 -c kernel.c\nld -o kernel kernel.o\n")
    r = cli("summary", "--format", "json", tmp_path)
    assert r.code == 2 and r.files() == []
    assert r.err.strip() == (f"ringtrace: {tmp_path}: no scope_stats files in this directory "
                             "(looked for */scope_stats/*.jsonl) and no host log (*.log)")


def test_a_log_named_otherwise_counts_when_the_parser_knows_its_lines(cli: Any, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copyfile(DEP_RUN / "host.log", run / "case1.log")
    (run / "pytest.log").write_text("collected 1 item\n")
    (f,) = cli("summary", "--format", "json", tmp_path).files()
    assert f["host_log"]["path"] == str(run / "case1.log") and f["host_log"]["orch_error_code"] == 4


# -- a host log in the run's folder is used without --host-log -----------------------------------


@pytest.mark.parametrize("arg", [".", "dfx_outputs", str(STATS)])
def test_the_run_folders_log_confirms_the_wedge(cli: Any, monkeypatch: pytest.MonkeyPatch, arg: str) -> None:
    monkeypatch.chdir(FLOW_DIR)
    r = cli("summary", "--format", "json", arg)
    assert r.code == 0, r.err
    (f,) = r.files()
    assert f["path"] == str(STATS) and f["host_log"]["path"] == "host.log"
    wedged = f["findings"][0]
    assert wedged["rule"] == "wedged" and wedged["confirmed"] is True
    assert "Confirmed by the host log: orch_error_code=3 FLOW_CONTROL_DEADLOCK on ring 3" in wedged["message"]
    assert r.err == ""


def test_equal_capacities_in_log_and_metadata_pair(cli: Any) -> None:
    """The real nuance: one run's ``Ring buffer sizes`` and deadlock ``size=`` equal its metadata's."""
    (f,) = cli("summary", "--format", "json", HEAP_DIR / STATS).files()
    assert f["host_log"]["ring_sizes"]["heap"] == [1024] * 4 and f["host_log"]["deadlock"]["heap_size"] == 1024
    assert f["findings"][0]["confirmed"] is True


def test_an_l3_out_dirs_log_pairs_by_rank(cli: Any, tmp_path: Path) -> None:
    l3 = copy(SAMPLES / "build_output/nested_l3_20261130_102011", tmp_path / "nested_l3_20261130_102011")
    (l3 / "host.log").write_text("[rank 1] [driver] run status: ok (0.2s)\n[rank 0] [driver] run status: ok (0.1s)\n")
    rank1 = l3 / "dfx_outputs/rank1/d1/scope_stats/scope_stats.jsonl"
    r = cli("summary", "--format", "json", rank1)
    assert r.code == 0, r.err
    (f,) = r.files()
    assert (f["host_log"]["rank"], f["host_log"]["run_status"]) == (1, ["ok (0.2s)"])
    assert "rank 0" in r.err and "not matched" in r.err  # the other rank's lines: said, not guessed
    files = cli("summary", "--format", "json", l3).files()
    assert [(x["labels"]["rank"], x["host_log"]["rank"]) for x in files] == [("0", 0), ("1", 1)]


def test_a_log_beside_the_scope_stats_folder_is_found(cli: Any, tmp_path: Path) -> None:
    run = copy(FLOW_DIR, tmp_path / "run")
    (run / "host.log").rename(run / "dfx_outputs" / "run.log")
    (f,) = cli("summary", "--format", "json", run / STATS).files()
    assert f["host_log"]["path"] == str(run / "dfx_outputs" / "run.log") and f["findings"][0]["confirmed"] is True


def test_a_log_deeper_than_the_run_folder_is_not_found_from_the_file(cli: Any, tmp_path: Path) -> None:
    run = copy(FLOW_DIR, tmp_path / "run")
    (run / "logs").mkdir()
    (run / "host.log").rename(run / "logs" / "host.log")
    (f,) = cli("summary", "--format", "json", run / STATS).files()
    assert f["host_log"] is None


def test_an_explicit_host_log_wins_over_the_found_one(cli: Any, tmp_path: Path) -> None:
    run = copy(FLOW_DIR, tmp_path / "run")
    other = run / "rerun.log"
    other.write_bytes((run / "host.log").read_bytes().replace(b"orch_error_code=3 sched", b"orch_error_code=1 sched"))
    r = cli("summary", "--format", "json", "--host-log", other, run)
    assert r.code == 0, r.err
    (f,) = r.files()  # the found host.log is not made a run of its own
    assert f["host_log"]["path"] == str(other) and f["host_log"]["orch_error_code"] == 1
    assert f"host log {run / 'host.log'}: not used: {run / STATS} has the host log given, {other}" in r.err


# -- a host log given as PATH ------------------------------------------------------------------


def test_a_host_log_given_as_path_is_read_as_one(cli: Any) -> None:
    r = cli("summary", "--format", "json", HEAP_RUN / "host.log")
    assert r.code == 0, r.err
    assert "JSON" not in r.err and "parse error" not in r.err
    (f,) = r.files()
    assert f["path"] is None and f["host_log"]["deadlock"]["heap_size"] == 196607
    r = cli("summary", "--format", "json", FLOW_DIR / "host.log", FLOW_DIR / STATS)  # beside its file: paired
    (f,) = r.files()
    assert f["path"] == str(FLOW_DIR / STATS) and f["findings"][0]["confirmed"] is True


def test_a_host_log_without_the_log_suffix_given_as_path(cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "stderr.txt"
    shutil.copyfile(HEAP_RUN / "host.log", out)
    (f,) = cli("summary", "--format", "json", out).files()
    assert f["host_log"]["ring"] == 1 and f["host_log"]["code_source"] == "fatal_error"


def test_a_scope_stats_file_under_another_name_is_still_one(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "copy.txt"
    shutil.copyfile(DONE_RUN / "scope_stats/scope_stats.jsonl", path)
    (f,) = cli("summary", "--format", "json", path).files()
    assert f["path"] == str(path) and f["records"] == 4


@pytest.mark.parametrize(("content", "why"), [
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8, "its first line is not a JSON object"),
    (b"just some notes\nnothing a runtime wrote\n", "its first line is not a JSON object"),
    (b"", "it is empty"),
])
def test_a_file_that_is_neither_is_one_clear_line_and_exit_2(tmp_path: Path, content: bytes, why: str) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "summary", str(path)], capture_output=True, text=True,
                          timeout=60, check=False, env={k: v for k, v in os.environ.items()
                                                        if not k.startswith("RINGTRACE_")})
    assert proc.returncode == 2
    assert proc.stderr == f"ringtrace: {path}: not a scope_stats file ({why}) and not a host log\n"
    assert proc.stdout == ""


def test_a_dot_log_path_that_says_nothing_known_is_neither(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "notes.log"
    path.write_text("hello\n")
    r = cli("check", path, DONE_RUN)
    assert r.code == 2
    assert f"{path}: not a scope_stats file (its first line is not a JSON object) and not a host log" in r.err
    assert f" {DONE_RUN / 'scope_stats/scope_stats.jsonl'}\n" in r.out  # what could be read is still reported


# -- never pair a log with a file of another run ---------------------------------------------


@pytest.mark.parametrize("how", ["--host-log", "PATH"])
def test_a_file_and_a_log_of_different_run_folders_are_not_paired(cli: Any, tmp_path: Path, how: str) -> None:
    run = tmp_path / "HeapRingDeadlock"
    (run / STATS).parent.mkdir(parents=True)
    shutil.copyfile(HEAP_DIR / STATS, run / STATS)  # the file alone: its run folder holds no log
    file = run / STATS
    args = ["--host-log", ABORT_LOG, file] if how == "--host-log" else [file, ABORT_LOG]
    r = cli("summary", "--format", "json", *args)
    assert r.code == 0, r.err
    f, lone = r.files()
    assert f["path"] == str(file) and f["host_log"] is None and f["findings"][0]["confirmed"] is None
    assert lone["path"] is None and lone["host_log"]["path"] == str(ABORT_LOG)
    assert lone["labels"]["run"] == "VectorExample_heap128k_abort"
    assert (f"host log {ABORT_LOG}: not paired with {file}: it lies outside that file's run folder ({run}), so it "
            "is another run's; reported as a run of its own") in r.err


def test_a_log_whose_heap_size_contradicts_the_metadata_is_another_run(cli: Any, tmp_path: Path) -> None:
    run = copy(DONE_RUN, tmp_path / "TestVectorExample_default_20261130_100600")
    shutil.copyfile(HEAP_RUN / "host.log", run / "host.log")  # the failed run at one byte less, beside the file
    r = cli("summary", "--format", "json", run)
    assert r.code == 0, r.err
    f, lone = r.files()
    assert f["path"] == str(run / "scope_stats/scope_stats.jsonl") and f["host_log"] is None
    rules = [x["rule"] for x in f["findings"]]  # a completed run, not "failed" by another run's log
    assert rules and "failed" not in rules and "wedged" not in rules
    assert lone["path"] is None and lone["host_log"]["deadlock"]["heap_size"] == 196607
    assert (f"host log {run / 'host.log'} says ring 1 heap size=196607, the file's metadata says 196608: another "
            f"run; not paired with {run / 'scope_stats/scope_stats.jsonl'}; reported as a run of its own") in r.err
    assert f["verdict"]["kind"] == "no_headroom"  # the completed run at its minimum: its one scope held it all
    r = cli("check", run)
    assert r.code == 1 and "FAIL (no scope_stats file; host log" in r.out  # the failed run fails the gate
    assert f"ok {run / 'scope_stats/scope_stats.jsonl'}" in r.out  # a warning does not


def test_a_log_whose_ring_buffer_sizes_contradict_the_metadata_is_another_run(cli: Any, tmp_path: Path) -> None:
    run = copy(HEAP_DIR, tmp_path / "HeapRingDeadlock")
    log = run / "host.log"
    log.write_bytes(log.read_bytes().replace(b"heap=[1024, 1024, 1024, 1024]", b"heap=[1024, 1024, 8192, 1024]"))
    r = cli("summary", "--format", "json", run)
    f, lone = r.files()
    assert f["host_log"] is None and lone["host_log"]["orch_error_code"] == 2
    assert "says ring 2 heap=8192 (its 'Ring buffer sizes' line), the file's metadata says 1024: another run" in r.err


# -- the pure matching rules -------------------------------------------------------------------


L2 = "w/dfx_outputs/scope_stats/scope_stats.jsonl"
META = Meta(6, False, 0, 2, (16,) * 4, (8192,) * 4, (64,) * 4, 100)


def _log(path: str, **kw: Any) -> HostLog:
    return HostLog(path, orch_error_code=2, **kw)


def test_no_file_beside_a_log_outside_its_folder() -> None:
    (m,) = match_logs([_log("/tmp/elsewhere.log")], [L2])
    assert m.file is None and m.kind == "outside" and "no scope_stats file in its directory tree" in m.reason
    (m,) = match_logs([_log("w/host.log")], [L2])
    assert m.file == L2 and m.kind == "tree"


@pytest.mark.parametrize(("log", "said"), [
    (_log("w/host.log", deadlock=Deadlock("heap", 3, "t", ring=1, heap_size=8191)),
     "says ring 1 heap size=8191, the file's metadata says 8192"),
    (_log("w/host.log", deadlock=Deadlock("task_window", 3, "t", ring=3, task_size=4)),
     "says ring 3 task_window size=4, the file's metadata says 16"),
    (_log("w/host.log", deadlock=Deadlock("dep_pool", 3, "t", ring=0, pool_size=4)),
     "says ring 0 dep_pool size=4, the file's metadata says 64"),
    (_log("w/host.log", deadlock=Deadlock("dep_pool", 3, "t", ring=None, pool_size=4)),  # a size no ring has
     "says a dep pool of 4 entries, the file's metadata says 64, 64, 64, 64 per ring"),
    (_log("w/host.log", ring_sizes=RingSizes((16,) * 4, (8192, 8192, 2 << 30, 8192), (64,) * 4)),
     f"says ring 2 heap={2 << 30} (its 'Ring buffer sizes' line), the file's metadata says 8192"),
])
def test_contradicting_capacities_are_another_run(log: HostLog, said: str) -> None:
    assert contradiction(log, META) == said
    (m,) = match_logs([log], [L2], {L2: META})
    assert (m.file, m.kind, m.candidate) == (None, "other_run", L2) and m.reason == f"{said}: another run; not paired"
    (m,) = match_logs([log], [L2])  # without the metadata nothing is known against it
    assert m.file == L2


@pytest.mark.parametrize("log", [
    _log("w/host.log", deadlock=Deadlock("heap", 3, "t", ring=1, heap_size=8192, task_size=99)),  # not short
    _log("w/host.log", deadlock=Deadlock("dep_pool", 3, "t", ring=None, pool_size=64)),  # no ring: one that has it
    _log("w/host.log", deadlock=Deadlock("heap", 3, "t", ring=1, heap_size=None)),
    _log("w/host.log", ring_sizes=RingSizes((16,) * 4, (8192,) * 4, (64,) * 4)),
])
def test_agreeing_or_unstated_capacities_pair(log: HostLog) -> None:
    assert contradiction(log, META) is None
    (m,) = match_logs([log], [L2], {L2: META})
    assert m.file == L2


def test_a_zero_capacity_is_unknown_and_contradicts_nothing() -> None:
    unknown = Meta(6, False, 0, 0, (0,) * 4, (0,) * 4, (0,) * 4, 0)
    log = _log("w/host.log", deadlock=Deadlock("heap", 3, "t", ring=1, heap_size=8191),
               ring_sizes=RingSizes((4,) * 4, (1,) * 4, (4,) * 4))
    assert contradiction(log, unknown) is None


def test_the_real_logs_agree_with_their_own_files() -> None:
    for run in (HEAP_DIR, FLOW_DIR):
        (log,) = parse_host_log(str(run / "host.log"), (run / "host.log").read_bytes())
        first = (run / STATS).read_bytes().split(b"\n", 1)[0]
        m = json.loads(first)
        own = Meta(m["version"], m["fatal"], m["dropped"], m["total"], tuple(m["task_window_max"]),
                   tuple(m["heap_max"]), tuple(m["dep_pool_max"]), m["tensormap_max"])
        assert contradiction(log, own) is None
    (log,) = parse_host_log("h.log", (HEAP_RUN / "host.log").read_bytes())
    done = json.loads((DONE_RUN / "scope_stats/scope_stats.jsonl").read_bytes().split(b"\n", 1)[0])
    assert contradiction(log, Meta(6, False, 0, 4, tuple(done["task_window_max"]), tuple(done["heap_max"]),
                                   tuple(done["dep_pool_max"]), 65536)) == (
        "says ring 1 heap size=196607, the file's metadata says 196608")


def test_generated_file_and_log_in_one_folder_pair(cli: Any, tmp_path: Path) -> None:
    run = tmp_path / "work"
    (run / STATS).parent.mkdir(parents=True)
    (run / STATS).write_bytes(encode_lines([meta(total=2, heap=8192), rec("(unknown):0", "begin", 0),
                                            rec("k.cpp:1", "begin", 1)]))
    (run / "host.log").write_text(
        "[ERROR] report_deadlock: [pto_ring_buffer.h:425] FATAL: Task Allocator Deadlock - Heap Exhausted! ring=1\n"
        "[ERROR] report_deadlock: [pto_ring_buffer.h:444]   Heap ring 1: top=8192, tail=0, size=8192, used=8192, "
        "available=0\n[ERROR] report_deadlock: [pto_ring_buffer.h:449]   Requested:  4096 bytes\n"
        "[ERROR] validate_runtime_impl: [runtime_maker.cpp:1019] PTO2 runtime failed: orch_error_code=2 "
        "sched_error_code=0 runtime_status=-2\n")
    (f,) = cli("summary", "--format", "json", run).files()
    assert f["host_log"]["ring"] == 1 and f["findings"][0]["confirmed"] is True
    log = run / "host.log"
    log.write_text(log.read_text().replace("size=8192", "size=8191"))
    f, lone = cli("summary", "--format", "json", run).files()
    assert f["host_log"] is None and lone["host_log"]["deadlock"]["heap_size"] == 8191


def test_a_binary_file_given_as_host_log_is_not_a_host_log(tmp_path: Path) -> None:

    run = tmp_path / "outputs" / "x_20261201_000000" / "scope_stats"
    run.mkdir(parents=True)
    (run / "scope_stats.jsonl").write_bytes(encode_lines([meta(total=2), rec("x.cpp:1", "begin", 0),
                                                          rec("x.cpp:1", "end", 0, tw=(0, 1))]))
    blob = tmp_path / "core.log"
    blob.write_bytes(bytes(range(256)) * 40)
    assert main(["check", str(run.parent), "--host-log", str(blob)]) == 2  # was: exit 0, "no failure reported"
    (run.parent / "host.log").write_bytes(b"\x7fELF\x00\x01" * 100)  # a binary log found in the run folder
    assert main(["check", str(run.parent)]) == 0  # a note, the run itself passes
