"""What the host log adds to the findings (``ringtrace.stages.diagnose``): every code of the enum, which pool
overflowed for code 4, a provable deadlock, the scheduler's codes on a wedge.

Every run goes through ``Run`` (decoder + pairer + diagnose) with the log, as the commands do.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from ringtrace.model.records import Deadlock, Finding, HostLog, RunFinished, Source
from ringtrace.model.runtime import ERROR_CODES
from ringtrace.stages.run import Run
from tests._support.scope_stats import Line, encode_lines, rec, with_totals


def with_log(lines: Sequence[Line], log: HostLog) -> RunFinished:
    run = Run(Source("test.jsonl"), None, host_log=log)
    run.feed(encode_lines(lines))
    fin = run.finish("eof")[-1]
    assert isinstance(fin, RunFinished)
    return fin


PASSING = with_totals([rec("(unknown):0", "begin", 0), rec("(unknown):0", "end", 0, tw=(0, 1), heap=(0, 64))])
WEDGED = with_totals([rec("(unknown):0", "begin", 0), rec("a.cpp:1", "begin", 3, tw=(0, 1)),
                      rec("a.cpp:2", "begin", 4, tw=(0, 3))], task_window=4)


def _failed_finding(log: HostLog) -> Finding:
    (f,) = [x for x in with_log(PASSING, log).findings if x.rule == "failed"]
    return f


def test_a_scheduler_code_with_orch_code_0_is_a_failed_finding() -> None:
    log = HostLog("h.log", orch_error_code=0, error_name="NONE", sched_error_code=100,
                  sched_error_name="SCHEDULER_TIMEOUT", runtime_status=-100, sched_sub_class="S1:running-stalled")
    f = _failed_finding(log)
    assert (f.severity, f.code) == ("error", 100)
    assert "the host log reports sched_error_code=100 SCHEDULER_TIMEOUT (sub_class=S1:running-stalled)" in f.message
    assert ERROR_CODES[100].meaning in f.message and "not a ring size" in f.message


def test_an_unknown_code_is_reported_by_its_number() -> None:
    f = _failed_finding(HostLog("h.log", orch_error_code=42, runtime_status=-42))
    assert f.code == 42 and "orch_error_code=42 (code 42, not in the runtime's enum)" in f.message
    assert "still a failure" in f.message


@pytest.mark.parametrize(("kind", "named", "not_named"), [
    ("fanin_pool", "the fanin spill pool (sized from ring_dep_pool, not recorded in scope_stats", ", the dep pool"),
    ("dep_pool", ", the dep pool: 4/4 entries in use, 2 entries needed", "fanin spill pool"),
])
def test_code_4_names_the_pool_that_overflowed(kind: str, named: str, not_named: str) -> None:
    d = Deadlock(kind, 12, "title", pool_used=4, pool_size=4, pool_needed=2)
    f = _failed_finding(HostLog("h.log", orch_error_code=4, error_name="DEP_POOL_OVERFLOW", deadlock=d))
    said = f.message.split(" (h.log:12)")[0]  # what the log says, before the enum's meaning of code 4
    assert named in said and not_named not in said
    assert "orch_error_code=4 DEP_POOL_OVERFLOW" in f.message and "(h.log:12)" in f.message


def test_a_provable_deadlock_is_said() -> None:
    proven = Deadlock("heap", 5, "t", ring=1, requested_bytes=65536, heap_size=131072, heap_available=0, provable=True)
    f = _failed_finding(HostLog("h.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK", deadlock=proven))
    assert "ring full (0 B free), a provable head-of-line deadlock" in f.message
    timed_out = msgspec.structs.replace(proven, provable=False)
    f = _failed_finding(HostLog("h.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK", deadlock=timed_out))
    assert "provable" not in f.message


def test_the_wedge_takes_the_scheduler_code_of_the_log() -> None:
    log = HostLog("h.log", orch_error_code=0, error_name="NONE", sched_error_code=100,
                  sched_error_name="SCHEDULER_TIMEOUT", runtime_status=-100)
    (w,) = [x for x in with_log(WEDGED, log).findings if x.rule == "wedged"]
    assert (w.confirmed, w.code, w.resource) == (False, 100, None)
    assert "The host log disagrees: it says sched_error_code=100 SCHEDULER_TIMEOUT" in w.message
    assert "the records suggested orch_error_code=3 FLOW_CONTROL_DEADLOCK" in w.message
    status_only = HostLog("h.log", orch_error_code=0, sched_error_code=0, runtime_status=-9)
    (w,) = [x for x in with_log(WEDGED, status_only).findings if x.rule == "wedged"]
    assert w.confirmed is None and w.code == 3
    assert "reports a failure without an error code: runtime_status=-9 with no error code latched" in w.message


def test_a_scope_deadlock_report_gives_the_scope_and_the_window() -> None:
    d = Deadlock("scope", 11, "Scope Deadlock Detected! (ring 1)", ring=1, task_active=3, task_size=4,
                 scope_tasks=3, scope_depth=2)
    f = _failed_finding(HostLog("h.log", orch_error_code=1, error_name="SCOPE_DEADLOCK", deadlock=d))
    assert "SCOPE_DEADLOCK on ring 1, 3 tasks in one scope against a task window of 4" in f.message
    assert (d.resource, d.capacity) == ("task_window", 4)
