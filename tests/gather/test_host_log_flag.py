"""``--host-log`` and ``check --expect`` end to end, through ``ringtrace.cli.main`` on real files.

Exit codes: 0 read / gate passed, 1 the gate failed (a ring size differs from ``--expect``, a
failure the log reports), 2 a usage error (bad ``--expect``) or an unreadable input.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli.expect import ExpectError, parse_expect, parse_size
from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.hostlog.parse import parse_host_log
from ringtrace.sinks import FanOut
from ringtrace.sinks.events import EventsSink
from tests._support.samples import SAMPLES
from tests._support.scope_stats import WriteJsonl, meta, rec

FLOW_DIR = SAMPLES / "failed/NestedScopes_window4_flow_control_deadlock"
DEP_LOG = SAMPLES / "failed/VectorExample_dep_pool4/host.log"
ABORT_LOG = SAMPLES / "failed/VectorExample_heap128k_abort/host.log"
TIGHT = {"task_window": [8, 8, 16, 64], "heap": [8192, 16384, 32768, 65536], "dep_pool": [64, 64, 256, 512]}
HOST_LOG_KEYS = {"path", "rank", "orch_error_code", "code_source", "error_name", "error_detail", "error_hint", "ring",
                 "requested_bytes", "ring_sizes", "deadlock", "fatal_lines", "run_status", "not_written", "problems",
                 "failed", "sched_error_code", "sched_error_name", "sched_sub_class", "runtime_status", "test_failure"}
DEADLOCK_KEYS = {"kind", "line", "title", "ring", "requested_bytes", "task_current", "task_last_alive", "task_active",
                 "task_size", "heap_top", "heap_tail", "heap_size", "heap_used", "heap_available", "pool_used",
                 "pool_size", "pool_needed", "suggestion", "provable", "recommended", "scope_tasks", "scope_depth",
                 "resource", "capacity", "pool", "backstop"}
SIZES = ("[INFO] resolve_arena_sizing: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[{tw}] heap=[{heap}] "
         "dep_pool=[{dep}]\n")


@pytest.fixture
def tight(write_jsonl: WriteJsonl) -> Path:
    """A passing run with the paged-attention sample's tight per-ring sizes."""
    lines = [rec("(unknown):0", "begin", 0), rec("(unknown):0", "end", 0, tw=(0, 1), heap=(0, 512), dp=(1, 2))]
    return write_jsonl([meta(total=2, task_window=TIGHT["task_window"], heap=TIGHT["heap"],
                             dep_pool=TIGHT["dep_pool"], tensormap=65536), *lines],
                       "run/dfx_outputs/scope_stats/scope_stats.jsonl")


def sizes_line(tw: list[int], heap: list[int], dep: list[int]) -> str:
    return SIZES.format(tw=", ".join(map(str, tw)), heap=", ".join(map(str, heap)), dep=", ".join(map(str, dep)))


# -- --host-log --------------------------------------------------------------------------------


def test_summary_json_carries_the_log_and_confirms_the_wedge(cli: Any) -> None:
    r = cli("summary", "--format", "json", "--host-log", FLOW_DIR / "host.log", FLOW_DIR)
    assert r.code == 0, r.err
    (f,) = r.files()
    log = f["host_log"]
    assert set(log) == HOST_LOG_KEYS and set(log["deadlock"]) == DEADLOCK_KEYS  # the README's contract
    assert {k: log[k] for k in ("orch_error_code", "error_name", "ring", "requested_bytes")} == {
        "orch_error_code": 3, "error_name": "FLOW_CONTROL_DEADLOCK", "ring": 3, "requested_bytes": None}
    assert log["path"] == str(FLOW_DIR / "host.log")
    assert log["ring_sizes"] == {"task_window": [4] * 4, "heap": [268435456] * 4, "dep_pool": [16384] * 4}
    assert log["fatal_lines"] == ["FATAL: Task Allocator Deadlock - Task Ring Full! ring=3"] and log["problems"] == []
    wedged = f["findings"][0]
    assert wedged["rule"] == "wedged" and wedged["confirmed"] is True
    assert "Confirmed by the host log: orch_error_code=3 FLOW_CONTROL_DEADLOCK on ring 3" in wedged["message"]


def test_without_a_log_host_log_is_null_and_confirmed_null(cli: Any, tmp_path: Path) -> None:
    stats = tmp_path / "run" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    stats.parent.mkdir(parents=True)
    shutil.copyfile(FLOW_DIR / "dfx_outputs/scope_stats/scope_stats.jsonl", stats)  # its run folder holds no log
    (f,) = cli("summary", "--format", "json", tmp_path / "run").files()
    assert f["host_log"] is None and f["findings"][0]["confirmed"] is None


def test_globs_and_a_log_that_matches_nothing(cli: Any, tmp_path: Path) -> None:
    shutil.copytree(FLOW_DIR, tmp_path / "flow")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "ok.log").write_text(sizes_line([16384] * 4, [268435456] * 4, [16384] * 4))
    r = cli("summary", "--format", "json", "--host-log", str(tmp_path / "*" / "*.log"), tmp_path / "flow")
    assert r.code == 0, r.err
    f, ok = r.files()  # the passing log of another folder is a run of its own, known from the log
    assert f["host_log"]["orch_error_code"] == 3 and f["host_log"]["path"] == str(tmp_path / "flow" / "host.log")
    assert ok["path"] is None and ok["host_log"]["path"] == str(tmp_path / "elsewhere" / "ok.log")
    assert ok["findings"] == [] and ok["labels"]["run"] == "elsewhere"
    flow = tmp_path / "flow"
    assert (f"host log {tmp_path / 'elsewhere' / 'ok.log'}: not paired with {flow}/dfx_outputs/scope_stats/"
            f"scope_stats.jsonl: it lies outside that file's run folder ({flow})") in r.err


@pytest.mark.parametrize(("arg", "message"), [("missing.log", "no such file"),
                                              ("nothing-*.log", "no file matches this pattern")])
def test_a_missing_log_is_an_input_error(cli: Any, tmp_path: Path, arg: str, message: str) -> None:
    r = cli("summary", "--format", "json", "--host-log", tmp_path / arg, FLOW_DIR)
    assert r.code == 2 and message in r.err
    assert len(r.files()) == 1  # what could be read is still reported


def test_a_malformed_line_is_reported_with_file_and_line(cli: Any, tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    log.write_bytes(b"\xff\xfe garbage\n[INFO] f: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[4, 4\n")
    r = cli("summary", "--host-log", log, FLOW_DIR)
    assert r.code == 0
    assert f"{log}:2: error: unreadable 'Ring buffer sizes' line" in r.err


def test_nothing_to_read_is_a_usage_error(cli: Any) -> None:
    r = cli("summary")
    assert r.code == 2 and "give a PATH and/or --host-log FILE" in r.err


# -- runs that left no scope_stats file ---------------------------------------------------------


def test_a_failed_run_without_a_file_is_reported_and_fails_check(cli: Any) -> None:
    r = cli("summary", "--format", "json", "--host-log", DEP_LOG)
    assert r.code == 0, r.err
    (f,) = r.files()
    assert (f["path"], f["records"], f["version"], f["labels"]["run"]) == (None, 0, None, "VectorExample_dep_pool4")
    assert f["host_log"]["orch_error_code"] == 4 and f["host_log"]["error_name"] == "DEP_POOL_OVERFLOW"
    (failed,) = [x for x in f["findings"] if x["rule"] == "failed"]
    assert failed["severity"] == "error" and "orch_error_code=4 DEP_POOL_OVERFLOW" in failed["message"]
    assert "No scope_stats records exist" in failed["message"]
    r = cli("check", "--host-log", DEP_LOG)
    assert r.code == 1
    assert r.out.startswith(f"FAIL (no scope_stats file; host log {DEP_LOG})") and "orch_error_code=4" in r.out


def test_a_run_directory_without_a_file_is_no_error_with_or_without_its_log_given(cli: Any, tmp_path: Path) -> None:
    run = tmp_path / "VectorExample_heap128k_abort"
    run.mkdir()
    shutil.copyfile(ABORT_LOG, run / "host.log")
    for args in (["--host-log", run / "host.log", run], [run]):  # the folder's host.log is found without the flag
        r = cli("check", *args)
        assert r.code == 1 and "no scope_stats files" not in r.err
        assert r.out.count("FAIL") == 1
        assert "orch_error_code=2 HEAP_RING_DEADLOCK on ring 1, requested 64.0 KiB" in r.out
    (run / "host.log").rename(run / "host.txt")  # a folder holding no log and no file is still an input error
    r = cli("check", run)
    assert r.code == 2 and "no scope_stats files" in r.err


def test_events_lines_carry_the_host_log(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    files = [FLOW_DIR / "dfx_outputs/scope_stats/scope_stats.jsonl"]
    (log,) = parse_host_log(str(FLOW_DIR / "host.log"), (FLOW_DIR / "host.log").read_bytes())
    sink = EventsSink.open(str(out))
    fan = FanOut([sink])
    assert read_files(files, fan, Thresholds(), host_logs={files[0]: log}) == []
    fan.close()
    (line,) = out.read_text().splitlines()
    obj = json.loads(line)
    assert obj["host_log"]["orch_error_code"] == 3 and obj["findings"][0]["confirmed"] is True


def test_convert_takes_host_logs(cli: Any, tmp_path: Path) -> None:
    trace = tmp_path / "t.pftrace"
    r = cli("convert", "-o", trace, "--host-log", FLOW_DIR / "host.log", "--host-log", DEP_LOG, FLOW_DIR)
    assert r.code == 0, r.err
    assert "2 source(s)" in r.out and trace.stat().st_size > 0  # the file's run and the log-only run


# -- check --expect ----------------------------------------------------------------------------


def test_expect_matches(cli: Any, tight: Path) -> None:
    r = cli("check", "--expect", "task_window=(8,8,16,64),heap=(8K,16K,32K,64K)", "--expect",
            "dep_pool=[64, 64, 256, 512]", tight)
    assert r.code == 0, r.out + r.err
    assert r.out.startswith("ok ")


def test_expect_zero_is_the_compile_default(cli: Any) -> None:
    default = SAMPLES / "outputs/TestScopeStats_default_20261130_101210"
    assert cli("check", "--expect", "task_window=0,heap=0,dep_pool=16K", default).code == 0
    r = cli("check", "--expect", "heap=(0,0,2G,0)", default)
    assert r.code == 1
    assert "ring 2 heap: expected 2.0 GiB (2147483648), the metadata says 256.0 MiB (268435456)" in r.out


def test_expect_mismatch_names_ring_and_both_values(cli: Any, tight: Path) -> None:
    r = cli("check", "--expect", "heap=(8K,16K,2*1024*1024*1024,64K),task_window=8", tight)
    assert r.code == 1
    assert "ring 2 heap: expected 2.0 GiB (2147483648), the metadata says 32.0 KiB (32768)" in r.out
    assert "ring 2 task_window: expected 8, the metadata says 16" in r.out
    assert "ring 3 task_window: expected 8, the metadata says 64" in r.out
    assert "ring 0 " not in r.out and "ring 1 " not in r.out


def test_expect_checks_the_logs_ring_buffer_sizes_too(cli: Any, tmp_path: Path) -> None:
    log = tmp_path / "run" / "host.log"  # a run that left its log and no file
    log.parent.mkdir()
    heap = [8192, 16384, 2147483648, 65536]
    log.write_text(sizes_line(TIGHT["task_window"], heap, TIGHT["dep_pool"]) + "[driver] run status: ok (0.1s)\n")
    r = cli("check", "--expect", "heap=(8K,16K,2G,64K)", log.parent)
    assert r.code == 0, r.out + r.err
    r = cli("check", "--expect", "heap=(8K,16K,32K,64K)", "--host-log", log)
    assert r.code == 1
    assert ("ring 2 heap: expected 32.0 KiB (32768), the host log's 'Ring buffer sizes' line says 2.0 GiB "
            "(2147483648)") in r.out


def test_a_log_whose_ring_sizes_contradict_the_metadata_is_not_paired(cli: Any, tight: Path) -> None:
    log = tight.parents[2] / "host.log"
    heap = [8192, 16384, 2147483648, 65536]  # not the sizes the file's run used: another run's log
    log.write_text(sizes_line(TIGHT["task_window"], heap, TIGHT["dep_pool"]) + "[driver] run status: ok (0.1s)\n")
    r = cli("summary", "--format", "json", "--host-log", log, tight)  # the log given: a run of its own
    assert r.code == 0, r.err
    f, other = r.files()
    assert f["host_log"] is None and not [x for x in f["findings"] if x["rule"] == "ring_sizes_mismatch"]
    assert other["path"] is None and other["host_log"]["ring_sizes"]["heap"] == heap
    assert (f"host log {log} says ring 2 heap=2147483648 (its 'Ring buffer sizes' line), the file's metadata "
            f"says 32768: another run; not paired with {tight}") in r.err
    r = cli("summary", "--format", "json", tight)  # the file named alone: that one run; the log beside it is not read
    assert r.code == 0, r.err
    [f] = r.files()
    assert f["host_log"] is None and not [x for x in f["findings"] if x["rule"] == "ring_sizes_mismatch"]
    assert (f"host log {log}: not read: says ring 2 heap=2147483648 (its 'Ring buffer sizes' line), the file's "
            "metadata says 32768: another run; not paired (the file was named on its own") in r.err
    r = cli("check", "--expect", "heap=(8K,16K,2G,64K)", tight)
    assert r.code == 1  # the file's own metadata: the override did not land
    assert "ring 2 heap: expected 2.0 GiB (2147483648), the metadata says 32.0 KiB (32768)" in r.out


def test_expect_without_any_size_to_compare_fails(cli: Any) -> None:
    r = cli("check", "--expect", "heap=128K", "--host-log", ABORT_LOG)  # no file, and no 'Ring buffer sizes' line
    assert r.code == 1
    assert "ring 1 heap: expected 128.0 KiB (131072), but neither a metadata line nor" in r.out


@pytest.mark.parametrize(("value", "message"), [
    ("heap=2X", "'2X' is not a size"),
    ("foo=1", "unknown resource 'foo'"),
    ("heap=(1,2)", "heap needs one value or 4 (one per ring), got 2"),
    ("heap", "'heap' is not RESOURCE=SIZE"),
    ("heap=(1,2,3,4", "unclosed tuple"),
    (",", "nothing to compare"),
])
def test_bad_expect_is_a_usage_error(cli: Any, tight: Path, value: str, message: str) -> None:
    r = cli("check", "--expect", value, tight)
    assert r.code == 2 and message in r.err and r.out == ""


def test_parse_expect_and_sizes() -> None:
    assert parse_size("2G") == 2 << 30 and parse_size("512k") == 512 << 10 and parse_size("1MiB") == 1 << 20
    assert parse_size("2 * 1024") == 2048 and parse_size("64") == 64 and parse_size("16KB") == 16 << 10
    e = parse_expect(["task_window=16", "heap=(0, 0, 2G, 0),dep_pool=0"])
    assert e == {"task_window": (16,) * 4, "heap": (256 << 20, 256 << 20, 2 << 30, 256 << 20),
                 "dep_pool": (16384,) * 4}
    with pytest.raises(ExpectError):
        parse_size("-1")


def test_a_log_path_that_is_not_utf8(cli: Any, tmp_path: Path) -> None:
    run = Path(os.fsdecode(bytes(tmp_path) + b"/run\xff"))
    shutil.copytree(FLOW_DIR, run)
    r = cli("summary", "--format", "json", "--host-log", run / "host.log", run)
    assert r.code == 0, r.err
    (f,) = r.files()
    assert f["host_log"]["path"].endswith("run\ufffd/host.log") and f["findings"][0]["confirmed"] is True
    r = cli("check", "--host-log", run / "host.log")  # matched to nothing given: a log-only run
    assert r.code == 1 and "run\ufffd/host.log" in r.out
