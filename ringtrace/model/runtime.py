"""Facts about the simpler runtime (tensormap_and_ringbuffer), each written once.

Sources: the user guide (``ring-heap-and-scope-stats.txt`` §1, §4, §6) and the format doc
(``scope-stats-format.md``: "The host log around a failure", "Sizing facts").  Pure data and
pure functions; imports nothing from ringtrace, so every stage may use it.
"""


import linecache
import math
import re
from typing import Any, NamedTuple

RINGS = 4
"""Ring sets per run (``CHIP_MAX_RING_DEPTH``); scope depth d uses ring ``min(d, 3)``."""

KIB = 1024


DEP_POOL_BATCH = 64
"""The runtime reclaims a ring's dep pool only once this many of the ring's tasks have retired since
the last reclaim (``PTO2_DEP_POOL_CLEANUP_INTERVAL`` in simpler's ``pto_runtime2_types.h``), and only
when an allocation has to wait: nothing is reclaimed before the scope owning the ring's 64th task
closes, so the entries live then are a need the records prove (on a ring with fewer tasks, all of them)."""


class Resource(NamedTuple):
    """One per-ring resource of the runtime: every fact about it that ringtrace uses, in one row of
    :data:`TABLE` (the old per-fact dicts below are derived from it).

    The last four say how it behaves where the three of today differ; a new row leaves them at their
    defaults (a resource that a scope's tasks hold until the scope exits, whose records prove its need).
    """

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
    counts_tasks: bool = False
    """One entry per task (the task window): its head counts the ring's tasks, which is how the pairer tells a
    scope that submitted one task, a scope nested before its parent allocated, and a ring's 64th task."""
    contiguous: bool = False
    """Its allocations are contiguous blocks of a ring of bytes (the heap): a block never straddles the ring's
    end (what an allocation that crossed it skipped is not held: ``pair.held_bytes``), one task's block must
    fit whole (``Peak.request`` proves a need), and versions 4-5 wrote its counters as offsets that wrap at the
    capacity (``decode`` unrolls them; the one resource those versions wrapped)."""
    batch: int = 0
    """Reclaimed only once this many of the ring's tasks retired since the last reclaim, and how many entries a
    task takes is timing (the dep pool: :data:`DEP_POOL_BATCH`): its records estimate the need (``Peak.batch``)
    and prove none.  0: held until the scope exits, the records prove the need."""
    origin: int = 0
    """Its counters' first value (the dep pool's entry 0 is reserved: 1): a tail past it has moved."""

    @property
    def start_field(self) -> str:
        """Its tail's field in the records (``Record``, the file's keys): ``heap_start``."""
        return f"{self.name}_start"

    @property
    def end_field(self) -> str:
        """Its head's field in the records: ``heap_end``."""
        return f"{self.name}_end"

    @property
    def max_field(self) -> str:
        """Its capacities' field in the metadata line (``Meta``): ``heap_max``."""
        return f"{self.name}_max"

    @property
    def optional(self) -> bool:
        """An older version's records lack it (it is newer than :data:`FIRST_VERSION`: the dep pool): None there."""
        return self.since_version > FIRST_VERSION

    @property
    def words(self) -> str:
        """Its name in sentences: ``dep pool``."""
        return self.name.replace("_", " ")


TABLE: tuple[Resource, ...] = (
    Resource("task_window", "tasks", "task-window slots", "", 16384, 4, 1, "ring_task_window",
             power_of_two=True, holds_one_less=True, counts_tasks=True),
    Resource("heap", "bytes", "heap bytes", "_bytes", 256 << 20, KIB, KIB, "ring_heap", bytes=True, contiguous=True),
    Resource("dep_pool", "entries", "dep-pool entries", "", 16384, 4, 1, "ring_dep_pool", since_version=5,
             batch=DEP_POOL_BATCH, origin=1),
)
"""The per-ring resources, in report order: one row each (adding a fourth is one row here, its two fields in
:class:`~ringtrace.model.records.Record`, one in :class:`~ringtrace.model.records.Meta` and one in
:class:`~ringtrace.model.records.RingSizes`; docs/design.md, "Ring resources")."""

FIRST_VERSION = min(r.since_version for r in TABLE)
"""The oldest scope_stats version with ring resources (4, the oldest read): the resources since then are in every
file's records."""

BY_NAME: dict[str, Resource] = {r.name: r for r in TABLE}

RESOURCES: tuple[str, ...] = tuple(r.name for r in TABLE)
"""The per-ring resources' names, in report order."""

COMPILE_DEFAULTS: dict[str, int] = {r.name: r.compile_default for r in TABLE}
"""The a2a3 compile defaults per ring: what ``0`` in a RunConfig field (or ``--expect``) stands for."""

CONFIG_KEYS: dict[str, str] = {r.name: r.config_key for r in TABLE}
"""The RunConfig field of each resource."""

SINCE_VERSION: dict[str, int] = {r.name: r.since_version for r in TABLE}
"""The first scope_stats version whose records carry each resource."""

[TASKS] = [r for r in TABLE if r.counts_tasks]  # exactly one row counts the tasks
"""The resource whose head counts the ring's tasks (the task window)."""
TASKS_AT = TABLE.index(TASKS)
"""Its index in :data:`TABLE` (and in ``Scope.usage``)."""


def unrolled(source: str, env: dict[str, Any]) -> dict[str, Any]:
    """What ``source`` defines (its functions, by name), compiled once with the globals ``env``.

    For the pure path's hot loops, which are written out over :data:`TABLE` and compiled where first needed
    (one block per resource, as fast as a loop written by hand for three; a loop over the table costs 2-3x
    per record; compiling one costs a few milliseconds, once per process: ``convert``'s compiled path pays it
    for the Perfetto loop, docs/performance.md).  The source is registered with
    :mod:`linecache`, so tracebacks and ``inspect`` show it."""
    names = ", ".join(re.findall(r"^def (\w+)", source, re.M))
    filename = f"<ringtrace: {names}, unrolled over model.runtime.TABLE>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    scope = dict(env)
    exec(compile(source, filename, "exec"), scope)
    return scope


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


DEADLOCK_CODES: dict[str, int] = {e.resource: code for code, e in sorted(ERROR_CODES.items()) if e.resource}
"""The code a ring resource's deadlock latches: HEAP_RING_DEADLOCK, DEP_POOL_OVERFLOW, and for the task window
FLOW_CONTROL_DEADLOCK (the later of its two: SCOPE_DEADLOCK is one scope that overfills it, told apart by its
own allocation).  A resource the runtime's enum does not name has none."""


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
