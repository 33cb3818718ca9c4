"""The records' derived fields: what a host log's codes say about a failed run."""

from __future__ import annotations

import pytest

from ringtrace.model.records import HostLog


@pytest.mark.parametrize(("log", "code", "name", "field"), [
    (HostLog("h.log", orch_error_code=2, error_name="HEAP_RING_DEADLOCK"), 2, "HEAP_RING_DEADLOCK", "orch_error_code"),
    (HostLog("h.log", orch_error_code=0, sched_error_code=100), 100, "SCHEDULER_TIMEOUT", "sched_error_code"),
    (HostLog("h.log", orch_error_code=0, sched_error_code=100, sched_error_name="SCHEDULER_TIMEOUT"), 100,
     "SCHEDULER_TIMEOUT", "sched_error_code"),
    (HostLog("h.log", fatal_code=4), 4, "DEP_POOL_OVERFLOW", None),  # only `Fatal error (code=4)`: the enum names it
    (HostLog("h.log", orch_error_code=42), 42, None, "orch_error_code"),  # not in the enum: a number, no name
    (HostLog("h.log", orch_error_code=0, sched_error_code=0, runtime_status=-1), None, None, None),
    (HostLog("h.log"), None, None, None),
])
def test_failure_code_and_name(log: HostLog, code: int | None, name: str | None, field: str | None) -> None:
    assert (log.failure_code, log.failure_name, log.latched_field) == (code, name, field)


def test_what_counts_as_failed() -> None:
    assert not HostLog("h.log", lines=10).failed
    assert not HostLog("h.log", orch_error_code=0, sched_error_code=0, runtime_status=0).failed
    assert HostLog("h.log", runtime_status=-2).failed and HostLog("h.log", orch_error_code=42).failed
    assert HostLog("h.log", fatal_lines=("FATAL: x",)).failed
    assert HostLog("h.log", run_status=("run failed",)).failed
