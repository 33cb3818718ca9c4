"""Small frozen records passed between the stages.

Data flows one way: ``decode`` turns bytes into :class:`Meta`, :class:`Record` and
:class:`Problem`; ``pair`` turns records into :class:`Scope` and, at the end of a run,
a :class:`RunSummary`.  All are immutable ``msgspec.Struct`` values (cheap to build,
safe to share between sinks); a stage hands them on and never mutates them.  The host log and
advice records live here because :class:`RunFinished` carries them; a diff's records live with
``analysis.diff``, the one stage that makes them.

Counter naming follows the file: for each ring resource ``*_start`` is the ring's tail
(oldest live entry) and ``*_end`` its head (next free entry) at the sample.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import msgspec

from ringtrace.model import runtime  # HostLog has an ``error_name`` field: the enum's lookup is runtime.error_name
from ringtrace.model.runtime import RESOURCES as RESOURCES  # re-exported: the per-ring resources, in report order

Phase = Literal["begin", "end"]
Severity = Literal["info", "warning", "error"]


class Labels(msgspec.Struct, frozen=True):
    """Where a source sits in a build tree (read off its path by ``layout``)."""

    run: str = ""
    rank: str = ""
    dispatch: str = ""
    program: str = ""


class Meta(msgspec.Struct, frozen=True):
    """Line 1 of a file: schema version and the effective ring capacities."""

    version: int
    fatal: bool
    dropped: int
    total: int | None
    task_window_max: tuple[int, ...]
    heap_max: tuple[int, ...]
    dep_pool_max: tuple[int, ...]
    tensormap_max: int | None

    def maxes(self, resource: str) -> tuple[int, ...]:
        """The capacities of ``resource`` (a row of ``model.runtime.TABLE``) per ring, as line 1 says them."""
        caps: tuple[int, ...] = getattr(self, f"{resource}_max")
        return caps

    def capacity(self, resource: str, ring: int) -> int | None:
        """Capacity of ``resource`` on ``ring``; None when the file does not say (or says 0)."""
        caps = self.maxes(resource)
        if ring < len(caps) and caps[ring] > 0:
            return caps[ring]
        return None


class Record(msgspec.Struct, frozen=True, gc=False):
    """One scope-boundary sample.  Heap counters are monotonic (v4/v5 already unrolled).

    A ``*_start``/``*_end`` pair per resource of ``model.runtime.TABLE`` (the decoder fills them by name), None
    where the file's version is older than the resource: ``dep_pool_*`` in version 4 files, which have no dep pool.
    ``line`` is the 1-based line number in the source file.
    """

    line: int
    site: str
    phase: Phase
    depth: int
    ring: int
    task_window_start: int
    task_window_end: int
    heap_start: int
    heap_end: int
    dep_pool_start: int | None
    dep_pool_end: int | None
    tensormap: int


class Problem(msgspec.Struct, frozen=True):
    """Something wrong with the input.  ``line`` is 0 when it concerns the whole file.

    ``reason`` is a short stable key (used in metrics and tests); ``message`` is for people.
    Errors are counted in ``parse_errors``; warnings are reported but not counted.
    """

    line: int
    reason: str
    message: str
    severity: Severity = "error"


class Usage(msgspec.Struct, frozen=True, gc=False):
    """One resource's figures for a paired scope (the guide's §5 metrics)."""

    high_water: int  # end.head - begin.tail: scope_high_water
    live_at_exit: int  # end.head - end.tail: real_occupancy
    alloc: int  # end.head - begin.head: scope_alloc


class Scope(msgspec.Struct, frozen=True, gc=False):
    """A paired begin/end.  ``usage`` is indexed like :data:`RESOURCES`; None where absent (v4 dep pool).

    ``sets``: the ring's peaks this scope set when it closed, one bit per (resource, figure):
    bit ``3 * resource index + figure`` with figures high_water, live_at_exit, alloc (the pairer's
    rule: the ring's first scope sets all, later ones only what they exceed).  The last scope that
    set a bit holds that peak of the run: exporters read it instead of comparing figures themselves.
    """

    site: str
    depth: int
    ring: int
    begin_line: int
    end_line: int
    parent_line: int  # begin line of the enclosing open scope, 0 at the top
    usage: tuple[Usage | None, ...]
    sets: int = 0
    begin_ring: int | None = None  # the begin's ring when it is not ``ring`` (odd data: the end is on another ring)


class OpenScope(msgspec.Struct, frozen=True):
    """A scope whose begin was read and whose end was not (yet)."""

    site: str
    depth: int
    ring: int
    line: int


class Peak(msgspec.Struct, frozen=True):
    """Maxima of one (ring, resource) over the ring's paired scopes."""

    ring: int
    resource: str
    capacity: int | None
    high_water: int
    high_water_site: str
    high_water_line: int
    live_at_exit: int
    live_at_exit_site: str
    alloc: int
    alloc_site: str
    live: int  # head - tail at the ring's latest boundary record
    scopes: int  # paired scopes on this ring (0: figures other than ``live`` are not meaningful)
    pinned: int = 0  # most held at once by open scopes' own tasks (freed only at scope exit): proven (see pair)
    open_pinned: int = 0  # what the scopes still open held at the ring's latest record (a wedge's backlog)
    request: int = 0  # largest single task's allocation seen (a hard lower bound on the need); 0: unknown
    tail_moved: bool = False  # the ring's tail moved: it wrapped and reclaimed (lazy: says nothing of headroom)
    batch: int = 0  # dep pool: entries live when the scope owning the ring's 64th task closed (see pair)

    @property
    def high_water_ratio(self) -> float | None:
        return self.high_water / self.capacity if self.capacity else None

    @property
    def alloc_ratio(self) -> float | None:
        """The largest single-scope allocation over capacity: held until that scope exits."""
        return self.alloc / self.capacity if self.capacity else None

    @property
    def live_at_exit_ratio(self) -> float | None:
        return self.live_at_exit / self.capacity if self.capacity else None

    @property
    def live_ratio(self) -> float | None:
        return self.live / self.capacity if self.capacity else None


class TensormapPeak(msgspec.Struct, frozen=True):
    capacity: int | None
    peak: int
    peak_site: str
    live: int


class Finding(msgspec.Struct, frozen=True):
    """A diagnosis: a named rule, a severity and an actionable message."""

    rule: str
    severity: Severity
    message: str
    ring: int | None = None
    resource: str | None = None
    site: str | None = None
    code: int | None = None  # ``wedged``: the likely orch_error_code; ``fill``: that resource's fill ratio
    fill: float | None = None
    confirmed: bool | None = None  # ``wedged``: the host log's code agrees (True), disagrees (False), or none


class RunSummary(msgspec.Struct, frozen=True):
    """Everything known about one run of one source when it is finished (or right now)."""

    meta: Meta | None
    records: int
    scopes: int
    unmatched_begins: int
    unmatched_ends: int
    parse_errors: int
    peaks: tuple[Peak, ...]
    tensormap: TensormapPeak
    wedged: tuple[OpenScope, ...]  # outermost first; the last is where the run wedged
    max_depth: int
    open: tuple[OpenScope, ...] = ()  # scopes open at the snapshot, outermost first (once finished: wedged or cut)
    sites: tuple[str, ...] = ()  # every scope site that began, sorted (what ``advise`` groups hand-named runs by)

    @property
    def open_scopes(self) -> int:
        return len(self.open)

    @property
    def complete(self) -> bool:
        """All records the device attempted, less the dropped ones, were read."""
        m = self.meta
        return m is not None and m.total is not None and self.records == m.total - m.dropped

    @property
    def missing(self) -> int:
        """Records the metadata promises (``total - dropped``) that were not read: > 0 for a cut file (or one
        still being written); 0 when the metadata has no total."""
        m = self.meta
        return max(0, m.total - m.dropped - self.records) if m is not None and m.total is not None else 0


def empty_summary(meta: Meta | None) -> RunSummary:
    """The summary of a run that has read no scope record yet (what ``Pairer(meta).summary()`` gives)."""
    tm_cap = meta.tensormap_max if meta is not None and meta.tensormap_max else None
    return RunSummary(meta, 0, 0, 0, 0, 0, (), TensormapPeak(tm_cap, 0, "", 0), (), 0)


class Abandoned(msgspec.Struct, frozen=True):
    """An open scope closed without its end (an unmatched begin), noticed at record ``line``."""

    scope: OpenScope
    line: int


class UnmatchedEnd(msgspec.Struct, frozen=True):
    """An end record with no open begin to pair with."""

    site: str
    depth: int
    ring: int
    line: int


PairEvent = Scope | Abandoned | UnmatchedEnd
"""What ``Pairer.push`` reports for one record, in the order it happened."""


def utf8(text: str) -> str:
    """``text`` as valid UTF-8 for output: a path that is not UTF-8 (surrogate escapes from
    ``os.fsdecode``) shows U+FFFD where its bad bytes are.  Paths used to open files stay raw."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # a lone surrogate that is not an escaped byte
            return text.encode("utf-8", "replace").decode("utf-8")
    return text


class Source(msgspec.Struct, frozen=True):
    """One run of one file: ``path`` plus ``generation``, bumped when the file is rewritten in place."""

    path: str
    labels: Labels = Labels()
    generation: int = 0

    @property
    def display_path(self) -> str:
        """``path`` for output (valid UTF-8)."""
        return utf8(self.path)

    @property
    def name(self) -> str:
        """A short human name: run/rank/dispatch where the path has them, else the path."""
        lab = self.labels
        parts = [p for p in (lab.run, f"rank{lab.rank}" if lab.rank else "",
                             f"d{lab.dispatch}" if lab.dispatch else "") if p]
        return "/".join(parts) if parts else self.path


class RunStarted(msgspec.Struct, frozen=True):
    """A run began: sent once, when its metadata line (or its first record) was read."""

    source: Source
    meta: Meta | None
    seen_at: float = 0.0  # wall-clock seconds when the file was first seen (its mtime for one-shot reads)


class RunProgress(msgspec.Struct, frozen=True):
    """What one chunk of bytes produced, in file order.  Pair events refer to records by line.

    ``summary`` is the run's live figures after this chunk (open scopes are not called wedged).
    """

    source: Source
    records: tuple[Record, ...]
    events: tuple[PairEvent, ...]
    problems: tuple[Problem, ...]
    summary: RunSummary | None = None


FinishReason = Literal["complete", "idle", "rewritten", "deleted", "shutdown", "eof"]

Column = tuple[int, int, int, int, str, int, int]
"""One column of a :class:`Band`: ``(first x, least value, greatest value, x of the greatest, and the site,
depth and begin line of the record or scope that had the greatest value)`` (a record's begin line is 0)."""


class Band(msgspec.Struct, frozen=True, gc=False):
    """One bounded series of a run's picture over the record lines (``ringtrace.stages.bands``): column ``k``
    covers the lines ``x`` with ``x >> shift == k`` (only columns with samples are listed, in x order) and keeps
    their extremes, the first sample at the greatest (M4-style: exact at its resolution)."""

    ring: int  # -1: the tensormap, which is not per ring
    resource: int  # index into RESOURCES (-1: the tensormap)
    shift: int
    columns: tuple[Column, ...]


class Bands(msgspec.Struct, frozen=True):
    """What the report draws of a run, whatever its length: at most ``2 * width`` columns per band, folded as
    the records were read (``Wants.bands``).  ``occupancy``: head - tail of each ring resource at every record
    (the dep pool where the record has one); ``high_water``: each paired scope's high water at its end line;
    both in (ring, resource) order, a band only where there was a sample."""

    width: int
    first_line: int  # the first record's line (0: none)
    last_line: int  # the last record's line (0: none)
    tensormap: Band  # the tensormap's live entries at every record
    occupancy: tuple[Band, ...]
    high_water: tuple[Band, ...]


class WedgeCause(msgspec.Struct, frozen=True):
    """Why a run most likely stopped inside one open scope: diagnosed once (``diagnose.wedge_causes``,
    with the configured thresholds and the host log) and read by every exporter.

    ``resource`` is the one closest to capacity on the scope's ring at the last sample (``"tensormap"``
    for code 11, None when the file has no capacities); ``code`` the likely orch_error_code (the host
    log's for the innermost scope when it has one); ``confirmed`` as on the ``wedged`` finding.
    """

    ring: int
    resource: str | None
    fill: float
    code: int | None = None
    confirmed: bool | None = None


VerdictKind = Literal["failed", "wedged", "cut_short", "test_failed", "no_headroom", "near_capacity", "healthy",
                      "unknown"]
VerdictSeverity = Literal["ok", "info", "warning", "error"]


class Verdict(msgspec.Struct, frozen=True):
    """The one verdict on a run, made once (``ringtrace.stages.verdict``) from what its records and host log
    prove, and rendered by every surface (summary, check, watch's log line, events, /metrics, the report,
    the overview, OTLP, Perfetto).  ``text`` is one line; ``ring``, ``resource``, ``site``, ``code`` are what
    it rests on (None where it rests on nothing of the kind); ``line`` the evidence's line in its file (a
    wedge's open begin, the host log's failure line; 0: none).  ``check`` fails a run whose severity is
    ``error``."""

    kind: VerdictKind
    severity: VerdictSeverity
    text: str
    ring: int | None = None
    resource: str | None = None
    site: str | None = None
    code: int | None = None
    code_name: str | None = None
    line: int = 0

    @property
    def fails_check(self) -> bool:
        return self.severity == "error"

    @property
    def short(self) -> str:
        """A few words for a table cell: ``wedged prefill_fwd.cpp:41, ring 1, HEAP_RING_DEADLOCK``."""
        parts = [self.kind.replace("_", " ") + (f" {self.site}" if self.site else "")]
        if self.ring is not None:
            parts.append(f"ring {self.ring}" + (f" {self.resource}" if self.resource else ""))
        if self.code_name or self.code is not None:
            parts.append(self.code_name or f"code {self.code}")
        return ", ".join(parts)


NOT_ASSESSED = Verdict("unknown", "info", "not assessed")


class RunFinished(msgspec.Struct, frozen=True):
    """A run ended; ``summary.wedged`` lists the scopes that never closed."""

    source: Source
    summary: RunSummary
    findings: tuple[Finding, ...]
    reason: FinishReason
    problems: tuple[Problem, ...] = ()  # the first problems of the run (all are counted in the summary)
    host_log: HostLog | None = None  # the runtime's host log matched to this run (``source.path`` "" : log only)
    advice: RunAdvice | None = None  # ring sizing (``ringtrace.analysis.advise``): this run's alone, or its program's
    key: str = ""  # the run's identity across restarts (path + file identity at the finish); "" when unknown
    wedge_causes: tuple[WedgeCause, ...] = ()  # one per ``summary.wedged`` scope, outermost first
    last_line: int = 0  # the line of the run's last record (0: none)
    seen_at: float = 0.0  # as on RunStarted: when the file was first seen (its mtime for one-shot reads)
    verdict: Verdict = NOT_ASSESSED  # the one verdict (``ringtrace.stages.verdict``)
    content_key: str = ""  # the run's identity under any name (file identity, content and mtime, no path); watch only
    bands: Bands | None = None  # the run's bounded picture, when a sink wants it (``Wants.bands``)

    @property
    def log_only(self) -> bool:
        """A run known from its host log alone (no scope_stats file)."""
        return not self.source.path and self.host_log is not None

    @property
    def unreadable(self) -> bool:
        """The file could not be read as scope_stats (empty, another format or version, neither a record nor a
        metadata line); a run known from its host log alone never is."""
        if self.log_only:
            return False
        return any(p.severity == "error" and p.reason in ("empty_file", "unsupported_version", "not_scope_stats")
                   for p in self.problems) or (self.summary.records == 0 and self.summary.meta is None)


class RingSizes(msgspec.Struct, frozen=True):
    """The host log's ``Ring buffer sizes:`` line: the capacities the runtime used, per ring."""

    task_window: tuple[int, ...]
    heap: tuple[int, ...]
    dep_pool: tuple[int, ...]
    line: int = 0

    def of(self, resource: str) -> tuple[int, ...]:
        """The sizes of ``resource`` (a row of ``model.runtime.TABLE``) per ring."""
        sizes: tuple[int, ...] = getattr(self, resource)
        return sizes


class Deadlock(msgspec.Struct, frozen=True):
    """The runtime's deadlock report (a ``FATAL:`` block): which ring, what was asked, the ring's state.

    ``kind`` is ``heap`` (Heap Exhausted), ``task_window`` (Task Ring Full), ``scope`` (Scope Deadlock),
    ``dep_pool`` (Dependency Pool Deadlock / Overflow, ``DepListPool exhausted``), ``fanin_pool`` (Fanin
    Spill Pool Overflow / Deadlock: the per-ring spill pool sized from ``ring_dep_pool``, not recorded in
    scope_stats) or ``other``.  Fields are None where the block does not say.

    The sizes the block states land in ``heap_size`` (``Heap ring R: size=N``, ``Increase heap (current: N)``),
    ``task_size`` (``active=A/S``, ``active_tasks: A / S``, ``task_window_size (N)``, ``Increase task window
    (current: N)``) and ``pool_size`` (``Pool used: A / S``, ``exhausted: A entries alive (capacity=S)``,
    ``Increase ... pool capacity (current: N, ...)``); :attr:`resource` and :attr:`capacity` name the one the
    report is about.  ``provable``: the block says ``Provable head-of-line deadlock.`` (the oldest task belongs
    to an open scope that cannot end while the orchestrator is blocked), not only a reclaim timeout.
    """

    kind: str
    line: int
    title: str
    ring: int | None = None
    requested_bytes: int | None = None
    task_current: int | None = None
    task_last_alive: int | None = None
    task_active: int | None = None
    task_size: int | None = None
    heap_top: int | None = None
    heap_tail: int | None = None
    heap_size: int | None = None
    heap_used: int | None = None
    heap_available: int | None = None
    pool_used: int | None = None
    pool_size: int | None = None
    pool_needed: int | None = None
    suggestion: str | None = None
    provable: bool = False
    recommended: int | None = None  # the size the block suggests (``recommended: N``, ``(e.g. N)``)
    scope_tasks: int | None = None  # Scope Deadlock: tasks in the current scope
    scope_depth: int | None = None  # Scope Deadlock: the scope's depth
    backstop: bool = False  # the allocator gave up after ~500 ms without reclaim progress (no provable deadlock)

    @property
    def resource(self) -> str | None:
        """The ring resource that ran out: ``task_window`` (also a Scope Deadlock), ``heap`` or ``dep_pool``
        (also the fanin spill pool, which ``ring_dep_pool`` sizes: :attr:`pool` tells them apart); None
        for another report."""
        kind = self.kind
        if kind in ("heap", "task_window", "dep_pool"):
            return kind
        return "task_window" if kind == "scope" else "dep_pool" if kind == "fanin_pool" else None

    @property
    def pool(self) -> str | None:
        """``dep_pool`` or ``fanin_spill_pool`` for a pool report, else None."""
        return "dep_pool" if self.kind == "dep_pool" else "fanin_spill_pool" if self.kind == "fanin_pool" else None

    @property
    def capacity(self) -> int | None:
        """The capacity of :attr:`resource` on :attr:`ring` the runtime ran with, as the block states it
        (None where it does not).  For the fanin spill pool it is that pool's size, which is the ring's
        ``ring_dep_pool`` value."""
        resource = self.resource
        if resource == "heap":
            return self.heap_size
        if resource == "task_window":
            return self.task_size
        if resource == "dep_pool":
            return self.pool_size
        return None


class HostLog(msgspec.Struct, frozen=True):
    """What one host log (or, in an L3 log, the lines of one rank) says about a run.

    ``orch_error_code`` comes from the ``orch_error_code=N`` lines, else from the scheduler's
    ``Fatal error (code=N)`` line (``code_source`` says which); ``sched_error_code`` from the failure
    line (``PTO2 runtime failed: orch_error_code=O sched_error_code=S runtime_status=-N``).  At most one
    of the two is nonzero: :attr:`latched_code` is that one, :attr:`latched_field` its field.
    ``error_name``/``sched_error_name`` name each code (from the ``error detail`` line, else the
    runtime's enum, :data:`ringtrace.model.runtime.ERROR_CODES`; None for a code not in it);
    ``error_detail`` is the detail line's text, ``sched_sub_class`` the scheduler timeout's
    ``sub_class=`` (``S1:running-stalled``) and ``sched_timeout`` that whole line.  ``rank``/``dispatch``
    are set when the lines name them.  ``problems`` are malformed known lines (with their line numbers).
    """

    path: str
    lines: int = 0
    rank: int | None = None
    dispatch: int | None = None
    orch_error_code: int | None = None
    code_source: str | None = None  # "orch_error_code" | "fatal_error"
    error_name: str | None = None
    error_detail: str | None = None
    error_hint: str | None = None
    sched_error_code: int | None = None
    runtime_status: int | None = None
    fatal_code: int | None = None
    deadlock: Deadlock | None = None
    ring_sizes: RingSizes | None = None
    fatal_lines: tuple[str, ...] = ()
    run_status: tuple[str, ...] = ()
    not_written: tuple[str, ...] = ()
    written: tuple[str, ...] = ()  # scope_stats paths the log says were written
    problems: tuple[Problem, ...] = ()
    sched_error_name: str | None = None
    sched_sub_class: str | None = None
    sched_timeout: str | None = None

    @property
    def latched_code(self) -> int | None:
        """The code the runtime latched: ``orch_error_code`` when nonzero, else a nonzero
        ``sched_error_code``; None when the log names no nonzero code."""
        if self.orch_error_code:
            return self.orch_error_code
        return self.sched_error_code or None

    @property
    def latched_field(self) -> str | None:
        """``orch_error_code`` or ``sched_error_code``: the field :attr:`latched_code` is in."""
        if self.orch_error_code:
            return "orch_error_code"
        return "sched_error_code" if self.sched_error_code else None

    @property
    def latched_name(self) -> str | None:
        """The name of :attr:`latched_code` as the log (or its parser, from the enum) gives it."""
        if self.orch_error_code:
            return self.error_name
        return self.sched_error_name if self.sched_error_code else None

    @property
    def failure_code(self) -> int | None:
        """The code a failed run reports: :attr:`latched_code`, else the FATAL line's code; None: no code."""
        return self.latched_code or self.fatal_code

    @property
    def failure_name(self) -> str | None:
        """The name of :attr:`failure_code`: the log's (or its parser's) name, else the runtime's enum."""
        return self.latched_name or runtime.error_name(self.failure_code)

    @property
    def runtime_failed(self) -> bool:
        """The runtime itself reports a failure: a nonzero code (either field, any number), a nonzero
        ``runtime_status``, a FATAL line or a deadlock report."""
        return bool(self.orch_error_code or self.sched_error_code or self.runtime_status or self.fatal_code
                    or self.fatal_lines or self.deadlock)

    @property
    def test_failure(self) -> str | None:
        """Why the scene test failed on numbers (``<Class>::<case> FAILED: Golden mismatch on 'out' ...``) in a
        run the runtime completed: its sizes sufficed; None when the log says no such thing, or the runtime
        itself failed (format doc, "A test that failed on numbers still ran to the end")."""
        if self.runtime_failed:
            return None
        for status in self.run_status:
            _, sep, why = status.partition(" FAILED: ")
            if sep and "mismatch" in why.lower():
                return why
        return None

    @property
    def failed(self) -> bool:
        """The run failed: :attr:`runtime_failed`, or a failed run status other than a test that failed on
        numbers (:attr:`test_failure`)."""
        if self.runtime_failed:
            return True
        return self.test_failure is None and any("error" in s.lower() or "fail" in s.lower()
                                                 for s in self.run_status)

    @property
    def ring(self) -> int | None:
        return self.deadlock.ring if self.deadlock is not None else None

    @property
    def requested_bytes(self) -> int | None:
        return self.deadlock.requested_bytes if self.deadlock is not None else None


Basis = Literal["tight", "oversized", "wedged", "dropped"]


class Advice(msgspec.Struct, frozen=True):
    """Sizing advice for one (ring, resource) of one run (``ringtrace.analysis.advise``; the README has the rules).

    ``lower_bound``/``upper_bound`` are capacities the records prove too small (need is at least this)
    or enough; ``estimate`` is the model's need (blocks held by open scopes, freed at scope exit, FIFO)
    as a capacity, before rounding and headroom.  ``recommended`` is null where only a measurement run
    can tell; then ``measure_next`` is the capacity for that run.  ``shrink``: below ``capacity``.
    """

    ring: int
    resource: str
    capacity: int | None
    lower_bound: int | None
    upper_bound: int | None
    estimate: int | None
    recommended: int | None
    basis: Basis
    reason: str
    measure_next: int | None = None
    shrink: bool = False
    driven_by: str = ""  # the source (run, rank) whose evidence sets the value; "" for one run on its own


class RunAdvice(msgspec.Struct, frozen=True):
    """A run's advice: one entry per ring and resource in use, the RunConfig values that change
    (``run_config``: resource -> a scalar or four per-ring values, 0 = compile default), and kernel-side
    fixes to try before resizing."""

    advice: tuple[Advice, ...] = ()
    run_config: tuple[tuple[str, int | tuple[int, ...]], ...] = ()
    kernel_fixes: tuple[str, ...] = ()
    final: bool = False  # every entry has a recommendation (no measurement run needed)
    evidence: str = ""  # what the advice rests on: "this run's evidence", or its program's runs


SinkEvent = RunStarted | RunProgress | RunFinished


class Wants(NamedTuple):
    """What a sink reads from :class:`RunProgress` besides its summary and problems, and whether it reads
    :attr:`RunFinished.bands`.

    A run whose sinks want neither records nor events leaves ``records`` and ``events`` empty: nothing per
    record is built or queued (Prometheus and the events file only need the summaries).  ``bands``: columns
    per band of the run's picture (:class:`Bands`, on its :class:`RunFinished`; the report's), 0: none.
    """

    records: bool = True
    events: bool = True
    bands: int = 0


WANT_ALL = Wants()
WANT_SUMMARIES = Wants(records=False, events=False)
