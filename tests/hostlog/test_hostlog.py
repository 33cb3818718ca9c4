"""The host-log parser (``ringtrace.hostlog.parse``) and the log-to-file matching (``ringtrace.gather.pairing``).

Real logs from the runtime's simulator are in ``tests/fixtures/samples/failed/*/host.log`` and
``tests/fixtures/hostlogs/`` (``sizing/``: the failing runs of the sizing bisection, with the one ring size
each run set in ``SIZING`` below); the expected values below were read off those files by hand.  The
synthetic blocks (fanin spill pool, dep pool overflow, scheduler timeout) are written as the runtime's
``LOG_ERROR`` calls write them.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringtrace.gather.pairing import match_logs, run_root
from ringtrace.hostlog.parse import MAX_LINE, HostLogParser, parse_host_log
from ringtrace.model.records import Deadlock, Finding, HostLog, RingSizes, RunSummary, Usage
from ringtrace.stages.diagnose import diagnose
from tests._support.samples import SAMPLES
from tests._support.scope_stats import read_lines, rec, with_totals

FIXTURES = Path(__file__).parents[1] / "fixtures"
FLOW_LOG = SAMPLES / "failed/NestedScopes_window4_flow_control_deadlock/host.log"
HEAP_LOG = SAMPLES / "failed/HeapRingDeadlock/host.log"
DEP_LOG = SAMPLES / "failed/VectorExample_dep_pool4/host.log"
ABORT_LOG = SAMPLES / "failed/VectorExample_heap128k_abort/host.log"
SCOPE_LOG = FIXTURES / "hostlogs/MixedExample_window4_scope_deadlock/host.log"
SIZING_LOGS = FIXTURES / "hostlogs/sizing"
REAL_LOGS = [FLOW_LOG, HEAP_LOG, DEP_LOG, ABORT_LOG, SCOPE_LOG]

P = "[mono_ns=1][T0x7f][ERROR] validate_runtime_impl: [runtime_maker.cpp:1019] "
D = "[ERROR] report_deadlock: [pto_ring_buffer.h:440] "


def one(data: bytes | str, path: str = "run/host.log") -> HostLog:
    logs = parse_host_log(path, data.encode() if isinstance(data, str) else data)
    assert len(logs) == 1
    return logs[0]


def test_flow_control_deadlock_log() -> None:
    log = one(FLOW_LOG.read_bytes(), str(FLOW_LOG))
    assert (log.orch_error_code, log.error_name, log.code_source) == (3, "FLOW_CONTROL_DEADLOCK", "orch_error_code")
    assert (log.sched_error_code, log.runtime_status, log.lines) == (0, -3, 75)
    assert log.error_detail is not None and log.error_detail.startswith("the task allocator could not admit")
    assert log.error_hint is not None and log.error_hint.startswith("raise ring_task_window")
    assert log.ring_sizes is not None and log.ring_sizes.line == 14
    assert log.ring_sizes.task_window == (4, 4, 4, 4) and log.ring_sizes.heap == (268435456,) * 4
    d = log.deadlock
    assert d is not None and (d.kind, d.ring, d.line) == ("task_window", 3, 37)
    assert (d.task_current, d.task_last_alive, d.task_active, d.task_size) == (3, 0, 3, 4)
    assert (d.heap_top, d.heap_tail, d.heap_size, d.heap_used, d.heap_available) == (5120, 0, 268435456, 5120,
                                                                                       268430336)
    assert log.fatal_lines == ("FATAL: Task Allocator Deadlock - Task Ring Full! ring=3",)
    assert log.run_status[0].startswith("RuntimeError: finalize_native_run failed with code -3")
    assert log.failed and log.problems == () and log.ring == 3


def test_heap_deadlock_log() -> None:
    log = one(HEAP_LOG.read_bytes())
    assert (log.orch_error_code, log.error_name, log.fatal_code) == (2, "HEAP_RING_DEADLOCK", 2)
    d = log.deadlock
    assert d is not None and (d.kind, d.ring, d.requested_bytes, d.heap_size, d.heap_available) == (
        "heap", 0, 32768, 1024, 1024)
    assert d.suggestion == "Increase heap (current: 1024); env PTO2_RING_HEAP=<bytes> (e.g. 2048)"
    assert log.ring_sizes is not None and log.ring_sizes.heap == (1024, 1024, 1024, 1024)
    assert log.requested_bytes == 32768


def test_abort_names_the_code_only_in_the_fatal_error_line() -> None:
    log = one(ABORT_LOG.read_bytes())
    assert (log.orch_error_code, log.code_source, log.error_name) == (2, "fatal_error", "HEAP_RING_DEADLOCK")
    assert log.error_detail is None and log.ring_sizes is None
    d = log.deadlock
    assert d is not None and (d.ring, d.requested_bytes, d.heap_top, d.heap_size, d.heap_available) == (
        1, 65536, 131072, 131072, 0)
    assert any(x.startswith("Thread 1: Fatal error (code=2)") for x in log.fatal_lines)


def test_dep_pool_and_scope_deadlock_logs() -> None:
    dep = one(DEP_LOG.read_bytes())
    assert (dep.orch_error_code, dep.error_name) == (4, "DEP_POOL_OVERFLOW")
    assert dep.deadlock is not None and (dep.deadlock.kind, dep.deadlock.ring) == ("dep_pool", None)
    assert (dep.deadlock.pool_used, dep.deadlock.pool_size, dep.deadlock.pool_needed) == (4, 4, 2)
    assert dep.not_written == ("<path>",)  # "<path> not produced; skipping scope_stats plot"
    assert dep.run_status[0].startswith("TestVectorExample::default FAILED:")
    assert (dep.deadlock.pool, dep.deadlock.resource, dep.deadlock.capacity) == ("dep_pool", "dep_pool", 4)
    assert dep.deadlock.provable and dep.deadlock.recommended == 8
    assert (dep.sched_error_code, dep.sched_error_name, dep.latched_field) == (0, "NONE", "orch_error_code")
    scope = one(SCOPE_LOG.read_bytes())
    assert (scope.orch_error_code, scope.error_name) == (1, "SCOPE_DEADLOCK")
    assert scope.deadlock is not None and (scope.deadlock.kind, scope.deadlock.ring) == ("scope", 1)
    d = scope.deadlock
    # "Tasks in current scope (3) >= task_window_size (4).", "scope_depth: 2", "active_tasks: 3 / 4",
    # "2. Increase task window (current: 4)"
    assert (d.scope_tasks, d.scope_depth, d.task_active, d.task_size) == (3, 2, 3, 4)
    assert (d.resource, d.capacity, d.pool, d.provable) == ("task_window", 4, None, False)
    assert d.suggestion == "Increase task window (current: 4)"


SizingRow = tuple[str, int, str, str, int | None, str, int, bool, int | None]
SIZING: list[SizingRow] = [
    # run folder, code, code source, kind, ring, resource, capacity (= the size runs.json says the run set),
    # provable, recommended
    ("bgemm/outputs/TestBenchmarkBgemm_Case0_20261130_100300", 4, "fatal_error", "dep_pool", None, "dep_pool", 47,
     True, 92),
    ("bgemm/outputs/TestBenchmarkBgemm_Case0_20261130_100500", 2, "fatal_error", "heap", 1, "heap", 786431, True,
     None),
    ("bgemm/outputs/TestBenchmarkBgemm_Case0_20261130_100700", 1, "fatal_error", "scope", 1, "task_window", 4,
     False, None),
    ("heap_rebase/outputs/TestHeapEmptyRingRebase_EmptyRingRebase_20261130_100400", 2, "fatal_error", "heap", 1,
     "heap", 1048575, False, 2097150),
    ("vector/outputs/TestVectorExample_default_20261130_100300", 4, "orch_error_code", "dep_pool", None, "dep_pool",
     5, True, 8),
    ("vector/outputs/TestVectorExample_default_20261130_100500", 2, "fatal_error", "heap", 0, "heap", 65535, False,
     131070),
    ("vector/outputs/TestVectorExample_default_20261130_100700", 2, "fatal_error", "heap", 1, "heap", 196607, True,
     None),
    ("vector/outputs/TestVectorExample_default_20261130_101000", 1, "orch_error_code", "scope", 1, "task_window", 4,
     False, None),
]


@pytest.mark.parametrize("row", SIZING, ids=[r[0].split("/")[0] + r[0][-7:] for r in SIZING])
def test_sizing_logs_state_the_capacity_the_run_set(row: SizingRow) -> None:
    run, code, source, kind, ring, resource, capacity, provable, recommended = row
    log = one((SIZING_LOGS / run / "host.log").read_bytes())
    assert (log.orch_error_code, log.code_source, log.latched_code, log.failed) == (code, source, code, True)
    assert log.ring_sizes is None and log.problems == ()  # no 'Ring buffer sizes:' line at the default level
    d = log.deadlock
    assert d is not None
    assert (d.kind, d.ring, d.resource, d.capacity, d.provable, d.recommended) == (
        kind, ring, resource, capacity, provable, recommended)
    assert d.pool == ("dep_pool" if kind == "dep_pool" else None)


def test_the_heap_report_and_the_pool_report_give_their_figures() -> None:
    heap = one((SIZING_LOGS / SIZING[1][0] / "host.log").read_bytes()).deadlock
    # "Heap ring 1: top=262144, tail=524288, size=786431, used=524287, available=262144", "Requested:  262144 bytes"
    assert heap is not None and (heap.heap_top, heap.heap_tail, heap.heap_used, heap.heap_available) == (
        262144, 524288, 524287, 262144)
    assert heap.requested_bytes == 262144 and (heap.task_active, heap.task_size) == (2, 16384)
    pool = one((SIZING_LOGS / SIZING[0][0] / "host.log").read_bytes()).deadlock
    # "Pool used:     46 / 47 (97.9%)", "Needed:        2 entries", "(current: 47, recommended: 92)"
    assert pool is not None and (pool.pool_used, pool.pool_size, pool.pool_needed) == (46, 47, 2)


A = "[ERROR] alloc: [pto_ring_buffer.h:712] "
R = "[ERROR] ensure_space: [pto_ring_buffer.cpp:201] "
RULE = "========================================"
FAILED4 = (P + "PTO2 runtime failed: orch_error_code=4 sched_error_code=0 runtime_status=-4\n"
           + P + "error detail: orch_error_code=4 DEP_POOL_OVERFLOW - a task's explicit fanin edges overflowed the "
           "ring's dependency spill pool\n")


def _block(prefix: str, *lines: str) -> str:
    return "".join(prefix + line + "\n" for line in lines)


def test_fanin_spill_pool_overflow_is_told_from_the_dep_pool() -> None:
    spill = one(_block(A, RULE, "FATAL: Fanin Spill Pool Overflow!", RULE,
                       "Fanin spill pool exhausted: 64 entries alive (capacity=64).", "  - Pool top:      65 (linear)",
                       "  - Pool tail:     1 (linear)", "  - High water:    64", "Solution:",
                       "  Increase fanin spill pool capacity (current: 64, recommended: 128).",
                       "  Compile-time: PTO2_DEP_LIST_POOL_SIZE in pto_runtime2_types.h",
                       "  Runtime env:  PTO2_RING_DEP_POOL=128", RULE) + FAILED4)
    d = spill.deadlock
    assert d is not None and (d.kind, d.pool, d.resource) == ("fanin_pool", "fanin_spill_pool", "dep_pool")
    assert (d.pool_used, d.pool_size, d.capacity, d.recommended, d.provable) == (64, 64, 64, 128, False)
    assert d.title == "Fanin Spill Pool Overflow!" and (spill.orch_error_code, spill.error_name) == (
        4, "DEP_POOL_OVERFLOW")
    dep = one(_block(A, RULE, "FATAL: Dependency Pool Overflow!", RULE,
                     "DepListPool exhausted: 16 entries alive (capacity=16).", "Solution:",
                     "  Increase dep pool capacity (current: 16, recommended: 32).", RULE) + FAILED4)
    d = dep.deadlock
    assert d is not None and (d.kind, d.pool, d.resource, d.capacity, d.recommended) == (
        "dep_pool", "dep_pool", "dep_pool", 16, 32)
    stuck = one(_block(R, RULE, "FATAL: Fanin Spill Pool Deadlock Detected!", RULE,
                       "Fanin spill pool cannot reclaim space after ~500 ms (no progress).",
                       "  - Pool used:     8 / 8 (100.0%)", "  - Needed:        1 entries") + FAILED4)
    d = stuck.deadlock
    assert d is not None and (d.kind, d.pool, d.capacity, d.pool_needed) == ("fanin_pool", "fanin_spill_pool", 8, 1)


def test_a_pool_exhausted_line_without_its_title_still_names_the_pool() -> None:
    log = one(A + "Fanin spill pool exhausted: 5 entries alive (capacity=5).\n" + FAILED4)
    d = log.deadlock
    assert d is not None and (d.kind, d.pool, d.capacity, d.line) == ("fanin_pool", "fanin_spill_pool", 5, 1)
    assert log.fatal_lines == ()  # no FATAL: line was written


def test_scheduler_code_detail_form_and_timeout_sub_class() -> None:
    log = one(P + "PTO2 runtime failed: orch_error_code=0 sched_error_code=100 runtime_status=-100\n"
              + P + "PTO2 scheduler timeout sub_class=S4:dependency-deadlock (detail=4) completed=3/9 running=0 "
              "ready=0 waiting=6 orch_done=1 stuck_task_id=17 stuck_core=-1\n"
              + P + "error detail: sched_error_code=100 SCHEDULER_TIMEOUT - the scheduler saw no forward progress "
              "within its timeout\n"
              + P + "error hint: read the sub_class= line below first\n")
    assert (log.orch_error_code, log.error_name, log.sched_error_code, log.sched_error_name) == (
        0, "NONE", 100, "SCHEDULER_TIMEOUT")
    assert (log.latched_code, log.latched_field, log.latched_name) == (100, "sched_error_code", "SCHEDULER_TIMEOUT")
    assert log.sched_sub_class == "S4:dependency-deadlock" and log.sched_timeout is not None
    assert "stuck_task_id=17" in log.sched_timeout
    assert log.error_detail == "the scheduler saw no forward progress within its timeout"
    assert log.failed and log.problems == () and log.deadlock is None


def test_a_code_outside_the_enum_is_a_failure_with_its_number() -> None:
    log = one(P + "PTO2 runtime failed: orch_error_code=42 sched_error_code=0 runtime_status=-42\n")
    assert (log.orch_error_code, log.error_name, log.latched_code, log.failed) == (42, None, 42, True)
    named = one(P + "PTO2 runtime failed: orch_error_code=0 sched_error_code=177 runtime_status=-1\n"
                + P + "error detail: sched_error_code=177 FUTURE_THING - a code of a newer runtime\n")
    assert (named.sched_error_name, named.latched_name, named.error_detail) == (
        "FUTURE_THING", "FUTURE_THING", "a code of a newer runtime")  # the log's own word for it
    abort = one("[ERROR] h: [scheduler_cold_path.cpp:65] Thread 0: Fatal error (code=42), sending EXIT_SIGNAL\n")
    assert (abort.orch_error_code, abort.code_source, abort.error_name, abort.failed) == (
        42, "fatal_error", None, True)


def test_the_retired_codes_detail_name_is_read() -> None:
    log = one(P + "PTO2 runtime failed: orch_error_code=6 sched_error_code=0 runtime_status=-6\n"
              + P + "error detail: orch_error_code=6 DEPENDENCY_OVERFLOW (retired; now reported as DEP_POOL_OVERFLOW)"
              " - retired code: per-task fanin overflow is now reported as DEP_POOL_OVERFLOW\n")
    assert (log.error_name, log.problems) == ("DEPENDENCY_OVERFLOW", ())
    assert log.error_detail == "retired code: per-task fanin overflow is now reported as DEP_POOL_OVERFLOW"


def test_a_zero_code_log_line_alone_is_no_failure_but_a_status_is() -> None:
    ok = one("[INFO] run: [aicpu_executor.cpp:882] Thread 0: Completed\n")
    assert not ok.failed and ok.latched_code is None
    status = one(P + "PTO2 runtime failed: orch_error_code=0 sched_error_code=0 runtime_status=-9\n")
    assert status.failed and status.latched_code is None and status.runtime_status == -9


def test_a_passing_log_reports_sizes_and_no_failure() -> None:
    log = one("[INFO] resolve_arena_sizing: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[8, 8, 16, 64] "
              "heap=[8192, 16384, 32768, 65536] dep_pool=[64, 64, 256, 512]\n"
              "[driver] run status: ok (0.12s)\n")
    assert not log.failed and log.orch_error_code is None and log.deadlock is None
    assert log.ring_sizes is not None and log.ring_sizes.dep_pool == (64, 64, 256, 512)


def test_the_hint_mentioning_ring_buffer_sizes_is_not_a_sizes_line() -> None:
    log = one(P + "error hint: raise ring_heap; the 'Ring buffer sizes:' line above reports the capacities\n")
    assert log.ring_sizes is None and log.problems == () and log.error_hint is not None


@pytest.mark.parametrize(("line", "what"), [
    ("[INFO] f: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[4, 4", "Ring buffer sizes"),
    ("[INFO] f: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[a] heap=[1] dep_pool=[1]", "Ring buffer sizes"),
    (P + "PTO2 runtime failed: orch_error_code=two sched_error_code=0", "runtime failed"),
    (P + "error detail: orch_error_code=2", "error detail"),
    (D + "FATAL: Task Allocator Deadlock - Heap Exhausted! ring=1\n" + D + "  Heap ring 1: top=x", "Heap ring"),
    (D + "FATAL: Task Allocator Deadlock - Heap Exhausted! ring=1\n" + D + "  Requested:  many bytes", "Requested"),
    (D + "FATAL: Task Allocator Deadlock - Task Ring Full! ring=3\n" + D + "  Task ring 3: current=?", "Task ring"),
    ("[ERROR] h: [s.cpp:65] Thread 0: Fatal error (code=x), sending", "Fatal error"),
    (P + "error detail: sched_error_code=100", "error detail"),
    (P + "PTO2 scheduler timeout sub_class= (detail=1)", "scheduler timeout"),
    (D + "FATAL: Dependency Pool Overflow!\n" + D + "DepListPool exhausted: many entries", "pool exhausted"),
    ("[ERROR] c: [o.cpp:573] FATAL: Scope Deadlock Detected! (ring 1)\n[ERROR] c: [o.cpp:575] Tasks in current scope "
     "(x) >= task_window_size (4).", "Tasks in current scope"),
    ("[ERROR] c: [o.cpp:573] FATAL: Scope Deadlock Detected! (ring 1)\n[ERROR] c: [o.cpp:579]   active_tasks: many",
     "active_tasks"),
])
def test_a_malformed_known_line_is_a_problem_with_its_line(line: str, what: str) -> None:
    text = "[INFO] something else\n" + line + "\n[INFO] after\n"
    log = one(text)
    assert len(log.problems) == 1, log.problems
    p = log.problems[0]
    assert p.line == text.count("\n", 0, text.index(line.splitlines()[-1])) + 1
    assert p.reason == "malformed_host_log" and what in p.message and p.severity == "error"
    assert log.lines == text.count("\n")


def test_truncated_log_keeps_what_was_read() -> None:
    data = FLOW_LOG.read_bytes()
    cut = data[: data.index(b"error detail:") + 20]  # in the middle of the error detail line
    log = one(cut)
    assert log.orch_error_code == 3 and log.deadlock is not None and log.ring_sizes is not None
    assert log.error_name == "FLOW_CONTROL_DEADLOCK"  # from the guide's table: the detail line is cut
    last = cut.count(b"\n") + 1
    assert [(p.line, p.reason, p.severity) for p in log.problems] == [
        (last, "malformed_host_log", "error"), (last, "truncated", "warning")]


def test_any_chunking_gives_the_same_result() -> None:
    data = HEAP_LOG.read_bytes()
    whole = parse_host_log("x", data)
    for size in (1, 7, 100, 4096):
        p = HostLogParser("x")
        for i in range(0, len(data), size):
            p.feed(data[i:i + size])
        assert p.finish() == whole


def test_crlf_binary_garbage_and_long_lines() -> None:
    garbage = bytes(range(256)) * 3
    data = (b"\x00\xff\xfe junk\r\n" + garbage + b"\n" + b"x" * (3 * MAX_LINE) + b"\n"
            + P.encode() + b"PTO2 runtime failed: orch_error_code=2 sched_error_code=0 runtime_status=-2\r\n"
            + b"[mono]" + b"\x80" * 100 + b"\n")
    log = one(data)
    assert log.orch_error_code == 2 and log.runtime_status == -2 and log.problems == ()
    assert log.lines == data.count(b"\n")


def test_an_unterminated_last_line_is_read_by_finish() -> None:
    p = HostLogParser("x")
    p.feed((P + "PTO2 runtime failed: orch_error_code=4").encode())
    assert p.result()[0].orch_error_code is None  # still waiting for the newline
    log = p.finish()[0]
    assert log.orch_error_code == 4 and [x.reason for x in log.problems] == ["truncated"]


def test_l3_log_splits_by_rank() -> None:
    text = ("[rank 0] [INFO] r: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[16384, 16384, 16384, 16384] "
            "heap=[268435456, 268435456, 268435456, 268435456] dep_pool=[16384, 16384, 16384, 16384]\n"
            "[rank 1] [INFO] r: [runtime_maker.cpp:546] Ring buffer sizes: task_window=[16, 16, 16, 16] "
            "heap=[8192, 8192, 8192, 8192] dep_pool=[64, 64, 64, 64]\n"
            "[rank 1] [ERROR] report_deadlock: [pto_ring_buffer.h:425] FATAL: Task Allocator Deadlock - Heap "
            "Exhausted! ring=3\n"
            "[ERROR] report_deadlock: [pto_ring_buffer.h:449]   Requested:  1024 bytes\n"  # untagged: the block's rank
            "[rank 1] " + P + "PTO2 runtime failed: orch_error_code=2 sched_error_code=0 runtime_status=-2\n"
            "[INFO] w: [c.cpp:1] scope_stats: wrote 9 records (dropped=0) to out/dfx_outputs/rank1/d1/scope_stats/"
            "scope_stats.jsonl\n")
    logs = parse_host_log("out/host.log", text.encode())
    assert [lg.rank for lg in logs] == [0, 1]
    r0, r1 = logs
    assert not r0.failed and r0.ring_sizes is not None and r0.ring_sizes.heap[0] == 268435456
    assert r1.orch_error_code == 2 and r1.deadlock is not None and r1.deadlock.requested_bytes == 1024
    assert r1.dispatch == 1 and r1.written == ("out/dfx_outputs/rank1/d1/scope_stats/scope_stats.jsonl",)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.binary(max_size=200),
    st.sampled_from([line + b"\n" for line in FLOW_LOG.read_bytes().splitlines()[30:75]]),
    st.sampled_from([b"Ring buffer sizes: task_window=[", b"FATAL: ", b"orch_error_code=", b"Fatal error (code=",
                     b"Heap ring ", b"Requested: ", b"[rank ", b"/rank1/d", b"\r", b"\n", b"NOT WRITTEN",
                     b"error detail: sched_error_code=", b"scheduler timeout sub_class=", b"DepListPool exhausted: ",
                     b"Fanin spill pool exhausted: ", b"FATAL: Fanin Spill Pool Overflow!", b"active_tasks: ",
                     b"Tasks in current scope (", b"Increase heap (current: ", b"Provable head-of-line deadlock."]),
), max_size=40), st.integers(min_value=1, max_value=64))
def test_fuzz_never_raises(parts: list[bytes], chunk: int) -> None:
    data = b"".join(parts)
    p = HostLogParser("fuzz.log")
    for i in range(0, len(data), chunk):
        p.feed(data[i:i + chunk])
    logs = p.finish()
    assert logs and all(lg.lines == data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
                        for lg in logs)
    assert not any(pr.reason == "internal_error" for lg in logs for pr in lg.problems)
    assert any(pr.reason == "truncated" for lg in logs for pr in lg.problems) == (bool(data) and data[-1:] != b"\n")
    assert logs == parse_host_log("fuzz.log", data)


# -- matching ----------------------------------------------------------------------------------


def _log(path: str, rank: int | None = None, dispatch: int | None = None, written: tuple[str, ...] = ()) -> HostLog:
    return HostLog(path, rank=rank, dispatch=dispatch, written=written, orch_error_code=2)


L2 = "w/dfx_outputs/scope_stats/scope_stats.jsonl"
R0 = "o/dfx_outputs/rank0/d0/scope_stats/scope_stats.jsonl"
R1 = "o/dfx_outputs/rank1/d1/scope_stats/scope_stats.jsonl"


def test_match_same_tree_only() -> None:
    (m,) = match_logs([_log("w/host.log")], [L2, R0])
    assert m.file == L2 and "directory tree" in m.reason
    for files in ([L2], [L2, R0]):  # a log outside the file's tree is another run, even beside a lone file
        (m,) = match_logs([_log("/tmp/elsewhere.log")], files)
        assert m.file is None and "no scope_stats file in its directory tree" in m.reason


def test_match_l3_by_rank_and_never_guesses() -> None:
    ms = match_logs([_log("o/host.log", 1), _log("o/host.log", 0)], [R0, R1])
    assert [(m.log.rank, m.file) for m in ms] == [(1, R1), (0, R0)]
    (m,) = match_logs([_log("o/host.log")], [R0, R1])
    assert m.file is None and "ranks 0, 1" in m.reason
    r1d2 = "o/dfx_outputs/rank1/d2/scope_stats/scope_stats.jsonl"
    (m,) = match_logs([_log("o/host.log", 1)], [R0, R1, r1d2])
    assert m.file is None and "does not say which" in m.reason
    (m,) = match_logs([_log("o/host.log", 1, 2)], [R0, R1, r1d2])
    assert m.file == r1d2
    (m,) = match_logs([_log("o/host.log", 5)], [R0, R1])
    assert m.file is None and "rank 5" in m.reason


def test_match_by_written_path_and_one_log_per_file() -> None:
    (m,) = match_logs([_log("logs/run.log", written=("/abs/" + R1,))], [R0, R1])
    assert m.file is None  # an absolute path elsewhere is not this file
    (m,) = match_logs([_log("logs/run.log", written=("dfx_outputs/rank1/d1/scope_stats/scope_stats.jsonl",))],
                      [R0, R1])
    assert m.file == R1 and "wrote" in m.reason
    a, b = match_logs([_log("w/a.log"), _log("w/b.log")], [L2])
    assert a.file == L2 and b.file is None and "already has host log w/a.log" in b.reason


# -- the findings a log changes (diagnose) ------------------------------------------------------


def _summary(lines: list[Any], **kw: Any) -> tuple[RunSummary, tuple[tuple[Usage | None, ...], ...]]:
    d = read_lines(with_totals(lines, **kw))
    return d.summary, tuple(d.pairer.open_usage())


FLOW_LINES = [rec("(unknown):0", "begin", 0), rec("a.cpp:1", "begin", 3, tw=(0, 1)),
              rec("a.cpp:2", "begin", 4, tw=(0, 3))]


def _wedged(log: HostLog | None, lines: list[Any] = FLOW_LINES, **kw: Any) -> Finding:
    s, usage = _summary(lines, **({"task_window": 4} | kw))
    (f,) = [x for x in diagnose(s, None, usage, log) if x.rule == "wedged"]
    return f


def test_wedged_confirmed_contradicted_or_unknown() -> None:
    assert _wedged(None).confirmed is None and _wedged(None).code == 3
    agree = _wedged(HostLog("h.log", orch_error_code=3, error_name="FLOW_CONTROL_DEADLOCK"))
    assert (agree.confirmed, agree.code) == (True, 3)
    assert "Confirmed by the host log: orch_error_code=3" in agree.message
    heap = Deadlock("heap", 7, "Heap Exhausted! ring=3", ring=3, requested_bytes=1024, heap_size=8192,
                    heap_available=0)
    disagree = _wedged(HostLog("h.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK", deadlock=heap))
    assert (disagree.confirmed, disagree.code, disagree.resource, disagree.fill) == (False, 2, None, None)
    assert ("The host log disagrees: it says orch_error_code=2 HEAP_RING_DEADLOCK on ring 3, requested 1.0 KiB, "
            "ring full (0 B free) (h.log:7), the records suggested orch_error_code=3") in disagree.message
    other_ring = _wedged(HostLog("h.log", orch_error_code=3, deadlock=Deadlock("task_window", 2, "", ring=1)))
    assert "the log names ring 1, the innermost open scope is on ring 3" in other_ring.message
    no_code = _wedged(HostLog("h.log", fatal_lines=("FATAL: something",)))
    assert no_code.confirmed is None and "reports a failure without an error code: FATAL: something" in no_code.message


def test_a_code_only_the_log_knows_is_named_and_confirmed() -> None:
    lines = [rec("(unknown):0", "begin", 0)]  # nothing near capacity: the records cannot tell
    assert _wedged(None, lines).code is None
    f = _wedged(HostLog("h.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK"), lines)
    assert (f.confirmed, f.code) == (True, 2) and "Named by the host log: orch_error_code=2" in f.message
    assert "look for orch_error_code= in the host log" not in f.message


def test_failed_without_a_wedge_and_sizes_mismatch() -> None:
    lines = [rec("(unknown):0", "begin", 0), rec("(unknown):0", "end", 0, tw=(0, 1))]
    s, _ = _summary(lines, heap=[1024, 2048, 4096, 8192])
    ok = HostLog("h.log", ring_sizes=RingSizes((16,) * 4, (1024, 2048, 4096, 8192), (64,) * 4, 3))
    assert diagnose(s, None, (), ok) == diagnose(s)
    bad = HostLog("h.log", orch_error_code=4, error_name="DEP_POOL_OVERFLOW",
                  ring_sizes=RingSizes((16,) * 4, (1024, 2048, 2 << 30, 8192), (64,) * 4, 3))
    rules = {f.rule: f for f in diagnose(s, None, (), bad)}
    assert rules["failed"].severity == "error" and rules["failed"].code == 4
    assert "although the records show no scope left open" in rules["failed"].message
    assert rules["ring_sizes_mismatch"].message.endswith(
        "ring 2 heap 2.0 GiB in the log, 4.0 KiB in the metadata: the log and the records may be from different runs")
    v4, _ = _summary([rec("(unknown):0", "begin", 0, dp=None), rec("(unknown):0", "end", 0, dp=None)], version=4)
    assert [f.rule for f in diagnose(v4, None, (), HostLog("h.log", ring_sizes=RingSizes(
        (16,) * 4, (1024,) * 4, (1,) * 4)))] == []  # no dep pool in a v4 file: nothing to compare


@pytest.mark.parametrize(("file", "root"), [
    ("w/dfx_outputs/scope_stats/scope_stats.jsonl", "w"),
    ("/b/o/dfx_outputs/rank1/d2/scope_stats/scope_stats.jsonl", "/b/o"),
    ("outputs/Case_20261130_101845/scope_stats/scope_stats.jsonl", "outputs/Case_20261130_101845"),
    ("scope_stats.jsonl", "."),
])
def test_run_root(file: str, root: str) -> None:
    assert run_root(PurePath(file)) == PurePath(root)


@pytest.mark.parametrize(("log", "code", "name"), [
    (HostLog("h.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK", fatal_code=3), 2, "HEAP_RING_DEADLOCK"),
    (HostLog("h.log", sched_error_code=100, sched_error_name="SCHEDULER_TIMEOUT"), 100, "SCHEDULER_TIMEOUT"),
    (HostLog("h.log", fatal_code=3), 3, "FLOW_CONTROL_DEADLOCK"),  # no latched code: the FATAL line's, by the enum
    (HostLog("h.log", orch_error_code=42), 42, None),  # not in the runtime's enum
    (HostLog("h.log", runtime_status=-1), None, None),
])
def test_the_failure_code_is_the_latched_one_else_the_fatal_lines(log: HostLog, code: int | None,
                                                                   name: str | None) -> None:
    assert (log.failure_code, log.failure_name) == (code, name)
