"""Facts about the simpler runtime (tensormap_and_ringbuffer), each written once.

Sources: the user guide (``ring-heap-and-scope-stats.txt`` §1, §4, §6) and the format doc
(``scope-stats-format.md``: "The host log around a failure", "Sizing facts").  Pure data and
pure functions; imports nothing from ringtrace, so every stage may use it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

RINGS = 4
"""Ring sets per run (``CHIP_MAX_RING_DEPTH``); scope depth d uses ring ``min(d, 3)``."""

KIB = 1024


class Resource(NamedTuple):
    """One per-ring resource of the runtime: every fact about it that ringtrace uses, in one row of
    :data:`TABLE` (the old per-fact dicts below are derived from it)."""

    name: str  # as records, metrics, flags and JSON name it: task_window, heap, dep_pool
    unit: str  # what it counts, for people: "tasks", "bytes", "entries"
    things: str  # what the metrics' help calls its units: "task-window slots", ...
    metric_suffix: str  # the Prometheus unit suffix of its figures ("_bytes" for the heap)
    compile_default: int  # the a2a3 compile default per ring: what 0 in a RunConfig field stands for
    floor: int  # the smallest capacity the runtime accepts at set-up (format doc, "Sizing facts")
    granule: int  # accepted capacities are multiples of it (the heap: whole KiB; the window: a power of two)
    config_key: str  # its RunConfig field
    bytes: bool = False  # counted in bytes (KiB/MiB/GiB for people, the Perfetto byte unit)
    power_of_two: bool = False  # accepted sizes are powers of two (the task window)
    holds_one_less: bool = False  # a ring of N holds N - 1 at once (the task window's full/empty slot)
    since_version: int = 4  # the first scope_stats version whose records carry it (the dep pool: 5)


TABLE: tuple[Resource, ...] = (
    Resource("task_window", "tasks", "task-window slots", "", 16384, 4, 1, "ring_task_window",
             power_of_two=True, holds_one_less=True),
    Resource("heap", "bytes", "heap bytes", "_bytes", 256 << 20, KIB, KIB, "ring_heap", bytes=True),
    Resource("dep_pool", "entries", "dep-pool entries", "", 16384, 4, 1, "ring_dep_pool", since_version=5),
)
"""The per-ring resources, in report order: one row each (adding a fourth is one row here, one field pair
in :class:`~ringtrace.model.records.Record` and :class:`~ringtrace.model.records.Meta`)."""

BY_NAME: dict[str, Resource] = {r.name: r for r in TABLE}

RESOURCES: tuple[str, ...] = tuple(r.name for r in TABLE)
"""The per-ring resources' names, in report order."""

COMPILE_DEFAULTS: dict[str, int] = {r.name: r.compile_default for r in TABLE}
"""The a2a3 compile defaults per ring: what ``0`` in a RunConfig field (or ``--expect``) stands for."""

CONFIG_KEYS: dict[str, str] = {r.name: r.config_key for r in TABLE}
"""The RunConfig field of each resource."""

SINCE_VERSION: dict[str, int] = {r.name: r.since_version for r in TABLE}
"""The first scope_stats version whose records carry each resource."""


DEP_POOL_BATCH = 64
"""The runtime reclaims a ring's dep pool only once this many of the ring's tasks have retired since
the last reclaim (``PTO2_DEP_POOL_CLEANUP_INTERVAL`` in simpler's ``pto_runtime2_types.h``), and only
when an allocation has to wait: nothing is reclaimed before the scope owning the ring's 64th task
closes, so the entries live then are a need the records prove (on a ring with fewer tasks, all of them)."""


class ErrorCode(NamedTuple):
    """One code of the runtime's error enum: its name, what it means, the first move (guide §6)."""

    name: str
    meaning: str
    move: str
    resource: str | None = None  # the ring resource a sizing change can fix (None: sizing cannot)


ERROR_CODES: dict[int, ErrorCode] = {
    0: ErrorCode("NONE", "no orchestrator error", ""),
    1: ErrorCode("SCOPE_DEADLOCK", "one scope submitted more tasks than the ring's task window holds; slots only "
                 "free at scope_end", "split the scope, or raise ring_task_window", "task_window"),
    2: ErrorCode("HEAP_RING_DEADLOCK", "the ring ran out of heap bytes: no further task can be admitted",
                 "scope the intermediates, shrink them, or raise ring_heap", "heap"),
    3: ErrorCode("FLOW_CONTROL_DEADLOCK", "the task window is blocked while heap is free, usually nesting on the "
                 "same ring", "move the nested submission to another ring, or raise ring_task_window", "task_window"),
    4: ErrorCode("DEP_POOL_OVERFLOW", "a task's fanin edges overflowed the ring's dep pool (or its fanin spill "
                 "pool, sized from the same value)", "cut the fanin, or raise ring_dep_pool", "dep_pool"),
    5: ErrorCode("INVALID_ARGS", "a task was submitted with invalid arguments: a program error",
                 "fix the orchestration code's task arguments"),
    6: ErrorCode("DEPENDENCY_OVERFLOW", "a task has more dependencies than the runtime supports (host-built-graph "
                 "runtime; retired in tensormap_and_ringbuffer)", "cut the task's dependencies"),
    7: ErrorCode("REQUIRE_SYNC_START_INVALID", "a task asked for a synchronous start the runtime cannot give: a "
                 "program error", "fix the task's sync-start request"),
    8: ErrorCode("TENSOR_WAIT_TIMEOUT", "a task waited too long for a tensor: a producer never ran or hung",
                 "look for a missing or hung producer (device logs)"),
    9: ErrorCode("EXPLICIT_ORCH_FATAL", "the orchestration code raised a fatal itself",
                 "read the fatal's message in the host log"),
    10: ErrorCode("SCOPE_TASKS_OVERFLOW", "one scope submitted more tasks than a scope may hold",
                  "split the scope"),
    11: ErrorCode("TENSORMAP_OVERFLOW", "the global tensormap wedged (it is not a ring resource)",
                  "extreme scale: check the tensormap row in the report"),
    100: ErrorCode("SCHEDULER_TIMEOUT", "the scheduler made no progress in time: a hang, not a ring size",
                   "read the 'scheduler timeout sub_class' line and the device logs"),
    101: ErrorCode("ASYNC_COMPLETION_INVALID", "an asynchronous completion the scheduler did not expect",
                   "a runtime or kernel error: read the device logs"),
    102: ErrorCode("ASYNC_WAIT_OVERFLOW", "too many outstanding asynchronous waits",
                   "a runtime limit, not a ring size: cut the outstanding async work"),
    103: ErrorCode("ASYNC_REGISTRATION_FAILED", "an asynchronous operation could not be registered",
                   "a runtime error: read the device logs"),
    104: ErrorCode("READY_QUEUE_OVERFLOW", "the scheduler's ready queue overflowed (host-built-graph runtime)",
                   "a runtime limit, not a ring size"),
}
"""Every code of the runtime's enum (orchestrator 0-11, scheduler 100-104).  Only 1-4 are ring
capacities that a RunConfig can fix (11, the tensormap, has no RunConfig field)."""


def error_name(code: int | None) -> str | None:
    """The enum name of ``code`` (None when unknown or None)."""
    entry = ERROR_CODES.get(code) if code is not None else None
    return entry.name if entry is not None else None


def describe_code(code: int) -> str:
    """``2 HEAP_RING_DEADLOCK: what it means``, or ``code 42 (not in the runtime's enum)``."""
    entry = ERROR_CODES.get(code)
    if entry is None:
        return f"code {code} (not in the runtime's enum)"
    return f"{code} {entry.name}: {entry.meaning}"


def sizing_resource(code: int | None) -> str | None:
    """The ring resource whose size causes ``code`` (None: sizing cannot fix it)."""
    entry = ERROR_CODES.get(code) if code is not None else None
    return entry.resource if entry is not None else None


# -- what the runtime accepts at set-up (format doc, "Sizing facts") ---------------------------------

MIN_ACCEPTED: dict[str, int] = {r.name: r.floor for r in TABLE}
"""The runtime's floor per resource (a task window >= 4, a heap >= 1 KiB, a dep pool >= 4)."""


def accept(resource: str, n: float) -> int:
    """The smallest capacity the runtime accepts that is >= ``n``: a task window is a power of two >= 4,
    a dep pool >= 4, a heap >= 1 KiB (rounded up to whole KiB: every minimum seen was a multiple)."""
    r = BY_NAME.get(resource)
    if r is None:
        return max(1, math.ceil(n))
    if r.power_of_two:
        return max(r.floor, 1 << max(0, math.ceil(math.log2(max(n, 1)))))
    return max(r.floor, math.ceil(n / r.granule) * r.granule)


def accept_below(resource: str, n: int) -> int | None:
    """The largest accepted capacity < ``n`` (None: nothing smaller is accepted)."""
    r = BY_NAME.get(resource)
    floor = r.floor if r is not None else 1
    if r is not None and r.power_of_two:
        below = 1 << max(0, (n - 1).bit_length() - 1)
    else:
        granule = r.granule if r is not None else 1
        below = (n - 1) // granule * granule
    return below if below >= floor and below < n else None


def usable(resource: str, capacity: int) -> int:
    """How much of ``capacity`` can be live at once: a task window of N holds N - 1 tasks."""
    r = BY_NAME.get(resource)
    return capacity - 1 if r is not None and r.holds_one_less else capacity


def fmt_amount(resource: str, n: int) -> str:
    """Bytes for the heap (KiB/MiB/GiB), plain counts otherwise."""
    r = BY_NAME.get(resource)
    if r is None or not r.bytes:
        return f"{n}"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
