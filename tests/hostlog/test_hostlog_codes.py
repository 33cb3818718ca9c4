"""Every code of the runtime's error enum in a host log: named, a failure, and ``check`` fails on it.

The logs are written the way the runtime writes them (``LOG_RUNTIME_FAILURE``: the failure line with
both fields, then ``error detail: <field>=<code> NAME - text`` for the field that latched, and for a
scheduler timeout the ``sub_class=`` line), in the forms seen in real logs:

* ``detail``: the failure line, the detail line and the hint (a run that ends cleanly);
* ``bare``: the failure line alone (a code the runtime has no text for is not annotated);
* ``abort``: only the scheduler's ``Fatal error (code=N)`` line (the process aborts first).

Each case is a failed run as the runtime's simulator leaves it: a run folder holding the host log alone
(it writes no scope_stats file for a failed run).  ``check`` must fail it (exit 1) and say the code and its
name.  Beside a small, valid, completed scope_stats file the same log is another run's: two runs, the file
passing and the log failing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ringtrace.hostlog.parse import parse_host_log
from ringtrace.model.runtime import ERROR_CODES
from tests._support.scope_stats import WriteJsonl, meta, rec

V = "[mono_ns=9][T0x7f][ERROR] validate_runtime_impl: [runtime_maker.cpp:1019] "
EXIT = "[ERROR] handle_orchestrator_exit: [scheduler_cold_path.cpp:65] "
TIMEOUT = ("PTO2 scheduler timeout sub_class=S1:running-stalled (detail=1) completed=0/1 running=1 ready=0 "
           "waiting=0 orch_done=1 stuck_task_id=42 stuck_core=5")
DETAIL_NAME = {6: "DEPENDENCY_OVERFLOW (retired; now reported as DEP_POOL_OVERFLOW)"}  # as the runtime prints it

ORCH = [c for c in ERROR_CODES if 1 <= c < 100]
SCHED = [c for c in ERROR_CODES if c >= 100]
CASES = ([(c, form) for c in ORCH for form in ("detail", "bare", "abort")]
         + [(c, form) for c in SCHED for form in ("detail", "bare")]
         + [(42, "bare"), (42, "abort"), (142, "bare")])  # not in the enum: a failure by its number


def field_of(code: int) -> str:
    return "sched_error_code" if code >= 100 else "orch_error_code"


def host_log(code: int, form: str) -> str:
    """The lines a failed run with ``code`` leaves, in ``form``."""
    lines = ["[INFO] resolve_and_dispatch: [scheduler_dispatch.cpp:904] Thread 0: PTO2 dispatch starting"]
    if form == "abort":
        lines.append(EXIT + f"Thread 0: Fatal error (code={code}), sending EXIT_SIGNAL to all cores. "
                            "completed_tasks=0, total_tasks=0")
        return "\n".join(lines) + "\n"
    orch, sched = (0, code) if code >= 100 else (code, 0)
    lines.append(V + f"PTO2 runtime failed: orch_error_code={orch} sched_error_code={sched} runtime_status=-{code}")
    if code == 100:
        lines.append(V + TIMEOUT)
    if form == "detail" and code in ERROR_CODES:
        name = DETAIL_NAME.get(code, ERROR_CODES[code].name)
        lines.append(V + f"error detail: {field_of(code)}={code} {name} - {ERROR_CODES[code].meaning}")
        lines.append(V + "error hint: see the doc. See docs/troubleshooting/device-error-codes.md")
    return "\n".join(lines) + "\n"  # no driver 'run status' line: the failure must be read off the codes


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A failed run's folder: the simulator leaves its host log alone (written by each test)."""
    folder = tmp_path / "outputs" / "TestX_case_20261201_100000"
    folder.mkdir(parents=True)
    return folder


def completed_file(write_jsonl: WriteJsonl, folder: str) -> Path:
    """A small, valid scope_stats file of a run that completed and passes ``check`` on its own."""
    lines = [rec("(unknown):0", "begin", 0), rec("(unknown):0", "end", 0, tw=(0, 1), heap=(0, 512), dp=(1, 2))]
    return write_jsonl([meta(total=2, task_window=16, heap=4096, dep_pool=64, tensormap=100), *lines],
                       f"{folder}/scope_stats/scope_stats.jsonl")


def test_a_scheduler_only_failure_fails_check_in_a_real_process(run_dir: Path) -> None:
    """orch_error_code=0 with sched_error_code=100: the run failed, so ``check`` exits 1 (it used to pass)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGTRACE_")}
    log = run_dir / "host.log"
    log.write_text(host_log(100, "detail"))
    r = subprocess.run([sys.executable, "-m", "ringtrace", "check", str(run_dir)], capture_output=True, text=True,
                       env=env, timeout=120, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith(f"FAIL (no scope_stats file; host log {log}")
    assert "SCHEDULER_TIMEOUT" in r.stdout


def test_a_failed_runs_log_beside_a_completed_file_is_another_run(cli: Any, write_jsonl: WriteJsonl) -> None:
    """The runtime writes no file for a failed run: a completed file and a failure log in one folder are two
    runs; the file keeps its own verdict (ok), the log is a run of its own that fails; the file named alone is
    that one run."""
    f = completed_file(write_jsonl, "outputs/TestX_case_20261201_100000")
    folder = f.parents[1]
    (folder / "host.log").write_text(host_log(4, "detail"))
    r = cli("check", folder)
    assert r.code == 1, r.out + r.err
    assert f"ok {f}" in r.out and "FAIL (no scope_stats file; host log" in r.out and "DEP_POOL_OVERFLOW" in r.out
    one = cli("check", f)
    assert one.code == 0 and one.out.strip() == f"ok {f}", one.out
    obj = cli("summary", "--format", "json", f).file()
    assert obj["verdict"]["kind"] == "healthy" and obj["host_log"] is None
    assert [x["rule"] for x in obj["findings"]] == ["other_run_log"]


@pytest.mark.parametrize(("code", "form"), CASES, ids=[f"{c}-{f}" for c, f in CASES])
def test_every_code_is_named_failed_and_fails_check(cli: Any, run_dir: Path, code: int, form: str) -> None:
    log = run_dir / "host.log"
    log.write_text(host_log(code, form))
    name = ERROR_CODES[code].name if code in ERROR_CODES else None
    field = "orch_error_code" if form == "abort" else field_of(code)  # 'Fatal error' is read as the orch code

    (parsed,) = parse_host_log(str(log), log.read_bytes())
    assert parsed.failed
    assert (parsed.latched_code, parsed.latched_field, parsed.latched_name) == (code, field, name)
    if field == "sched_error_code":
        assert (parsed.orch_error_code, parsed.sched_error_code, parsed.sched_error_name) == (0, code, name)
    else:
        assert (parsed.orch_error_code, parsed.error_name) == (code, name)
        assert parsed.code_source == ("fatal_error" if form == "abort" else "orch_error_code")
    if form == "detail" and code in ERROR_CODES:
        assert parsed.error_detail == ERROR_CODES[code].meaning
    assert parsed.problems == ()

    said = f"{field}={code} {name}" if name else f"{field}={code} (code {code}, not in the runtime's enum)"
    r = cli("check", "--host-log", log)
    assert r.code == 1, r.out + r.err
    assert r.out.startswith("FAIL ") and (name or f"code {code}") in r.out

    f = cli("summary", "--format", "json", "--host-log", log).file()
    assert f["verdict"]["kind"] == "failed" and f["verdict"]["code"] == code and f["verdict"]["severity"] == "error"
    h = f["host_log"]
    assert h["failed"] is True
    assert (h[field], h["error_name" if field == "orch_error_code" else "sched_error_name"]) == (code, name)
    if field == "sched_error_code":
        assert h["orch_error_code"] == 0 and h["error_name"] == "NONE"
    (failed,) = [x for x in f["findings"] if x["rule"] == "failed"]
    assert failed["severity"] == "error" and said in failed["message"]
    if code in ERROR_CODES:
        assert ERROR_CODES[code].meaning in failed["message"]
    else:
        assert "still a failure" in failed["message"]


@pytest.mark.parametrize("code", [c for c in ERROR_CODES if c and ERROR_CODES[c].resource is None and c != 11])
def test_a_code_sizing_cannot_fix_says_so(cli: Any, run_dir: Path, code: int) -> None:
    log = run_dir / "host.log"
    log.write_text(host_log(code, "bare"))
    (failed,) = [x for x in cli("summary", "--format", "json", "--host-log", log, run_dir).file()["findings"]
                 if x["rule"] == "failed"]
    assert "not a ring size" in failed["message"]  # the enum's own words, or the note after them
    assert failed["message"].count("not a ring size") == 1


@pytest.mark.parametrize("code", [1, 2, 3, 4, 11])
def test_a_ring_code_is_not_called_unfixable(cli: Any, run_dir: Path, code: int) -> None:
    log = run_dir / "host.log"
    log.write_text(host_log(code, "detail"))
    (failed,) = [x for x in cli("summary", "--format", "json", "--host-log", log, run_dir).file()["findings"]
                 if x["rule"] == "failed"]
    assert "not a ring size" not in failed["message"] and ERROR_CODES[code].move in failed["message"]


def test_a_failure_line_without_a_code_still_fails_check(cli: Any, run_dir: Path) -> None:
    log = run_dir / "host.log"
    log.write_text(V + "PTO2 runtime failed: orch_error_code=0 sched_error_code=0 runtime_status=-7\n")
    (parsed,) = parse_host_log(str(log), log.read_bytes())
    assert parsed.failed and parsed.latched_code is None
    r = cli("check", "--host-log", log, run_dir)
    assert r.code == 1 and "runtime_status=-7 with no error code latched" in r.out


def test_a_passing_log_passes_check(cli: Any, write_jsonl: WriteJsonl) -> None:
    run_dir = completed_file(write_jsonl, "run").parents[1]
    log = run_dir / "host.log"
    log.write_text("[INFO] run: [aicpu_executor.cpp:882] Thread 0: Completed\n[driver] run status: ok (0.1s)\n")
    r = cli("check", "--host-log", log, run_dir)
    assert r.code == 0, r.out + r.err
    assert r.out.startswith("ok ")


def test_expect_never_needs_the_ring_buffer_sizes_line(cli: Any, write_jsonl: WriteJsonl) -> None:
    """At the default log level the runtime writes no 'Ring buffer sizes:' line: ``--expect`` compares
    with the metadata alone, and the log's absence of the line is no reason."""
    run_dir = completed_file(write_jsonl, "run").parents[1]
    log = run_dir / "host.log"
    log.write_text("[INFO] run: [aicpu_executor.cpp:882] Thread 0: Completed\n[driver] run status: ok (0.1s)\n")
    r = cli("check", "--expect", "task_window=16,heap=4K,dep_pool=64", "--host-log", log, run_dir)
    assert r.code == 0, r.out + r.err
    r = cli("check", "--expect", "heap=(4K,4K,8K,4K)", "--host-log", log, run_dir)
    assert r.code == 1
    assert "ring 2 heap: expected 8.0 KiB (8192), the metadata says 4.0 KiB (4096)" in r.out
    assert "Ring buffer sizes" not in r.out
