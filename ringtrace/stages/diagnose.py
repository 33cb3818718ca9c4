"""Run summary -> findings: the user guide's "Interpret it" table and failure modes (§5, §6).

Pure.  Every finding names the rule, a severity and a message with ring, resource, site and
numbers, so a person can act on it without opening the file.  Thresholds are settable
(``Thresholds``, from the configuration) and documented in the README.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ringtrace.config import Thresholds
from ringtrace.model.records import (
    RESOURCES,
    Deadlock,
    Finding,
    HostLog,
    Meta,
    OpenScope,
    Peak,
    RunSummary,
    Severity,
    Usage,
    WedgeCause,
)
from ringtrace.model.runtime import DEADLOCK_CODES, ERROR_CODES, TABLE, TASKS, TASKS_AT, error_name
from ringtrace.model.runtime import fmt_amount as fmt_amount
from ringtrace.stages.findings import BY_NAME
from ringtrace.stages.need import proven_need


def _pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{100 * ratio:.0f}%"


def _finding(rule: str, message: str, ring: int | None = None, resource: str | None = None,
             site: str | None = None, severity: Severity | None = None, **kw: Any) -> Finding:
    """A finding of a catalogued rule (:data:`ringtrace.stages.findings.RULES`), at its severity unless given."""
    return Finding(rule, severity or BY_NAME[rule].severity, message, ring, resource, site, **kw)


def diagnose(s: RunSummary, th: Thresholds | None = None,
             open_usage: Sequence[tuple[Usage | None, ...]] = (), host_log: HostLog | None = None,
             ended: str = "") -> tuple[Finding, ...]:
    """All findings for ``s``, most severe first (the rules: :mod:`ringtrace.stages.findings`).

    ``open_usage`` (from :meth:`Pairer.open_usage`, aligned with ``s.wedged``) lets the wedge rule
    see what the wedged scopes allocated themselves; without it SCOPE_DEADLOCK is told from
    FLOW_CONTROL_DEADLOCK by the number of open scopes on the ring only.

    ``host_log``, the run's host log: its code confirms (or contradicts) the wedge's likely code;
    a failure it reports with no wedge in the records (or with no records at all) is ``failed``; a
    test that failed on numbers is ``test_failed``.  ``ended``: ``deleted`` or ``rewritten`` when the file
    went away under the reader (then a file that is not complete is ``cut_short``, as one with fewer
    records than its metadata's total is).
    """
    th = th or Thresholds()
    out: list[Finding] = []
    meta = s.meta
    if s.missing or (ended in ("deleted", "rewritten") and not s.complete):
        out.append(_cut_short(s, ended))
    elif s.wedged:
        inner_usage = open_usage[-1] if len(open_usage) == len(s.wedged) else None
        out.append(_wedged(s, s.wedged, th, inner_usage, host_log))
    if host_log is not None and host_log.failed and not s.wedged:
        out.append(_failed(s, host_log))
    if host_log is not None and host_log.test_failure is not None:
        out.append(_finding("test_failed", f"the run completed but its test failed on numbers: "
                                           f"{host_log.test_failure} ({host_log.path}): its sizes sufficed, not a "
                                           "ring problem"))
    if host_log is not None and meta is not None:
        out.extend(_sizes_mismatch(meta, host_log))
    if meta is not None and meta.fatal:
        out.append(_finding("fatal", "a fatal was latched mid-run (\"fatal\": true): records after it are "
                                     "diagnostic only"))
    if meta is not None and meta.dropped > 0:
        out.append(_finding("dropped", f"{meta.dropped} records were dropped by the collector (back-pressure): "
                                       "peaks are lower bounds; re-run with less concurrency before trusting them"))
    if s.parse_errors:
        out.append(_finding("parse_errors", f"{s.parse_errors} lines could not be read; figures cover the rest"))
    if (s.unmatched_begins or s.unmatched_ends) and (meta is None or meta.dropped == 0):
        out.append(_finding("unmatched", f"{s.unmatched_begins} begins and {s.unmatched_ends} ends did not pair "
                                         "although nothing was reported dropped"))
    out.extend(_depth_cap(s))
    out.extend(_needs(s, th))
    tm = s.tensormap
    if tm.capacity and tm.peak >= th.near * tm.capacity:
        out.append(_finding(
            "near_capacity", f"tensormap peaked at {tm.peak} of {tm.capacity} entries "
                             f"({_pct(tm.peak / tm.capacity)}) at {tm.peak_site}; when it fills the run fails with "
                             "orch_error_code=11 TENSORMAP_OVERFLOW", None, "tensormap", tm.peak_site))
    out.extend(_collapse(s, th))
    if s.max_depth > 3:
        ring3 = [(p, n) for p in s.peaks if p.ring == 3 and p.capacity
                 for n in (proven_need(p, s).value,) if n >= th.near * p.capacity]
        text = (f"scopes nest {s.max_depth} deep; ring 3 is a clamp, so depths 3..{s.max_depth} all share ring 3 "
                "and nesting past depth 3 only concentrates pressure there")
        worst = max(ring3, key=lambda q: q[1] / (q[0].capacity or 1))[0] if ring3 else None
        if worst is not None:
            text += (f": ring 3's {worst.resource} need is near its capacity; move the inner scopes' work to rings "
                     "1-2 or raise ring 3's capacity")
        out.append(_finding("deep_nesting", text, 3, worst.resource if worst else None,
                            severity="warning" if worst else "info"))
    order = {"error": 0, "warning": 1, "info": 2}
    return tuple(sorted(out, key=lambda f: order[f.severity]))


def _cut_short(s: RunSummary, ended: str) -> Finding:
    meta = s.meta
    if s.missing and meta is not None and meta.total is not None:
        what = (f"{s.records} of the {meta.total - meta.dropped} records the metadata promises were read "
                f"({s.missing} missing)")
    else:
        what = f"{s.records} records read"
    how = f"the file was {ended} before its run ended" if ended in ("deleted", "rewritten") else \
        "the file is cut or was still being written"
    still = f"the {s.open_scopes} scope(s) still open are not called wedged and " if s.open_scopes else ""
    return _finding("cut_short", f"{how}: {what}; {still}no error code is guessed: the figures cover what was read")


def _needs(s: RunSummary, th: Thresholds) -> list[Finding]:
    """``no_headroom`` and ``near_capacity``: a need the records prove (never occupancy) against capacity."""
    out: list[Finding] = []
    for p in s.peaks:
        need = proven_need(p, s)
        if p.capacity is None or not need.value:
            continue
        where = f"ring {p.ring} {p.resource}"
        amount = f"{fmt_amount(p.resource, need.value)} of {fmt_amount(p.resource, p.capacity)}"
        if need.value >= p.capacity:
            out.append(_finding("no_headroom", f"{where}: {need.why}: a need of {amount}, all of it; the run had "
                                               "nothing to spare and a longer run (a longer sequence, more layers) "
                                               f"needs more: raise ring_{p.resource} (advise sizes it)",
                                p.ring, p.resource))
        elif need.value >= th.near * p.capacity:
            out.append(_finding("near_capacity", f"{where}: {need.why}: a need of {amount} "
                                                 f"({_pct(need.value / p.capacity)}): little room for a longer run",
                                p.ring, p.resource))
    return out


_COLLAPSE = tuple(r.name for r in sorted(TABLE, key=lambda r: not r.contiguous) if not r.batch)
"""The resources whose need the records prove (a batch-reclaimed one's is timing), the heap's first: the collapse
rule names the first that shows one."""


def _collapse(s: RunSummary, th: Thresholds) -> list[Finding]:
    """One ring carries the proven need of a resource while the other rings in the file carry none (at most
    ``idle`` of its need), and that need is near the ring's capacity.  Where the need is, not how each ring was
    sized: a ring sized to its need is full, so the rule compares needs, never shares of capacity."""
    out: list[Finding] = []
    for resource in _COLLAPSE:
        peaks = [p for p in s.peaks if p.resource == resource and p.capacity]
        if len({p.ring for p in peaks}) < 2:
            continue
        needs = {p.ring: proven_need(p, s).value for p in peaks}
        p = max(peaks, key=lambda q: needs[q.ring])
        if not needs[p.ring] or any(needs[q.ring] > th.idle * needs[p.ring] for q in peaks if q is not p):
            continue
        share = needs[p.ring] / (p.capacity or 1)
        if share < th.near:
            continue
        others = ", ".join(str(q.ring) for q in peaks if q is not p)
        out.append(_finding(
            "auto_scope_collapse", f"ring {p.ring} carries the {resource} need the records prove (a proven need "
                                   f"of {_pct(share)} of its capacity) while rings {others} carry none: "
                                   "auto-scope collapse or all work at one depth; place scopes so the load "
                                   "spreads over rings 0-3 (guide §3)", p.ring, resource))
        break
    return out


def _depth_cap(s: RunSummary) -> list[Finding]:
    """``depth_cap`` (warning): the records reached the collector's depth cap, so pairing past it may be shifted.

    Read from ``depth_cap_line`` and ``uncounted`` of the pairer's summary (``ringtrace.stages.pair.CappedSummary``;
    by attribute, as this module does not import the pairer): no finding for a summary without them.
    """
    line = getattr(s, "depth_cap_line", 0)
    if not line:
        return []
    uncounted = getattr(s, "uncounted", 0)
    return [Finding(
        "depth_cap", "warning",
        f"scopes nest 64 deep (depth 63 first reached at line {line}): the runtime's collector keeps at most 64 "
        "open scopes, so a deeper begin is not recorded while its end is, attributed to the depth-63 scope; from "
        f"line {line} on an end may pair with the wrong begin. The {uncounted} scope(s) that closed at or after "
        f"line {line} are not counted in the peaks: the ring figures cover the scopes that closed before it and "
        "are lower bounds for the run (keep nesting under 64 levels to measure it exactly)")]


def likely_error(s: RunSummary, innermost: OpenScope, th: Thresholds | None = None,
                 usage: tuple[Usage | None, ...] | None = None) -> tuple[int | None, Peak | None, float]:
    """The orch_error_code a wedge most likely raised, the resource behind it and its fill ratio.

    At the last sample of the innermost scope's ring: the tensormap at ``near`` -> 11; the scope's
    own task-window allocation (``usage``, its usage so far) at ``near`` -> 1 SCOPE_DEADLOCK;
    else the fullest resource of the ring, when at ``wedge`` or more: heap -> 2, dep pool -> 4,
    task window -> 3 FLOW_CONTROL_DEADLOCK when other open scopes share the ring, else 1.
    (None, None, 0.0) when nothing is full enough to blame.
    """
    th = th or Thresholds()
    tm = s.tensormap
    if tm.capacity and tm.live / tm.capacity >= th.near:
        return 11, None, tm.live / tm.capacity
    ring = [p for p in s.peaks if p.ring == innermost.ring and p.capacity]
    if not ring:
        return None, None, 0.0
    tw = next((p for p in ring if p.resource == TASKS.name), None)
    own = usage[TASKS_AT] if usage else None
    if tw is not None and tw.capacity and own is not None and own.alloc >= th.near * tw.capacity:
        return 1, tw, own.alloc / tw.capacity
    worst = max(ring, key=lambda p: p.live_ratio or 0.0)
    ratio = worst.live_ratio or 0.0
    if ratio <= 0.0 or ratio < th.wedge:
        return None, None, 0.0
    if worst.resource != TASKS.name:  # its deadlock's code (None: one the runtime's enum does not name)
        return DEADLOCK_CODES.get(worst.resource), worst, ratio
    same_ring = sum(1 for o in s.wedged if o.ring == innermost.ring)
    return (3 if same_ring > 1 else 1), worst, ratio


def _capacities(s: RunSummary, ring: int) -> str:
    caps = [f"{p.resource} {fmt_amount(p.resource, p.capacity)}" for p in s.peaks if p.ring == ring and p.capacity]
    return ", ".join(caps) if caps else "not in the metadata"


def _code_text(log: HostLog) -> str | None:
    """``orch_error_code=2 HEAP_RING_DEADLOCK``, ``sched_error_code=100 SCHEDULER_TIMEOUT (sub_class=S1:...)``,
    ``orch_error_code=42 (code 42, not in the runtime's enum)``; None when the log latched no code."""
    code = log.latched_code
    if code is None:
        return None
    name = log.latched_name or error_name(code)
    text = f"{log.latched_field}={code} " + (name if name else f"(code {code}, not in the runtime's enum)")
    if log.sched_sub_class and log.latched_field == "sched_error_code":
        text += f" (sub_class={log.sched_sub_class})"
    return text


def _pool_text(d: Deadlock) -> str:
    if d.kind == "fanin_pool":
        text = (", the fanin spill pool (sized from ring_dep_pool, not recorded in scope_stats: the dep_pool "
                "columns can look fine)")
    else:
        text = ", the dep pool"
    if d.pool_used is not None and d.pool_size is not None:
        text += f": {d.pool_used}/{d.pool_size} entries in use"
    if d.pool_needed is not None:
        text += f", {d.pool_needed} entries needed"
    return text


def _bytes(n: int) -> str:
    """``64.0 KiB``, and the exact count where that rounds (a ring of 65535 bytes is not 64.0 KiB)."""
    return fmt_amount("heap", n) + (f" ({n} B)" if n >= 1024 and n % 1024 else "")


def describe_log(log: HostLog) -> str:
    """The log's error in a line: ``orch_error_code=2 HEAP_RING_DEADLOCK on ring 3, requested 1.0 KiB, ring full``.

    The code is the one the runtime latched (either field; a code outside the enum by its number), then
    what the deadlock report says: the ring, what was asked, which pool (the dep pool or the fanin spill
    pool), and whether the runtime proved a head-of-line deadlock.
    """
    text = _code_text(log)
    if text is None:
        text = (f"runtime_status={log.runtime_status} with no error code latched" if log.runtime_status else
                (log.fatal_lines or log.run_status or ("a failure",))[0])
    note = (" (named only by the scheduler's 'Fatal error' line: the process ended before the orch_error_code line)"
            if log.code_source == "fatal_error" else "")
    d = log.deadlock
    if d is None:
        return text + note
    if d.ring is not None:
        text += f" on ring {d.ring}"
    if d.kind == "heap" and d.requested_bytes is not None:
        text += f", requested {_bytes(d.requested_bytes)}"
        if d.heap_size is not None and d.requested_bytes > d.heap_size:
            text += f", more than the whole ring ({_bytes(d.heap_size)})"
        elif d.heap_available is not None and d.heap_available <= d.requested_bytes:
            text += f", ring full ({_bytes(d.heap_available)} free)"
    elif d.kind == "task_window" and d.task_active is not None and d.task_size:
        text += f", {d.task_active}/{d.task_size} task slots in use"
        if d.task_active >= d.task_size - 1:
            text += ", ring full (a window of N holds N - 1 tasks)"
    elif d.kind == "scope" and d.scope_tasks is not None and d.task_size:
        text += (f", {d.scope_tasks} tasks in one scope against a task window of {d.task_size} (a window of N "
                 "holds N - 1 tasks)")
    elif d.kind in ("dep_pool", "fanin_pool"):
        text += _pool_text(d)
    if d.provable:
        text += ", a provable head-of-line deadlock (the oldest task belongs to a scope that cannot end)"
    return text + note


def _where(log: HostLog) -> str:
    line = log.deadlock.line if log.deadlock is not None else 0
    return f"{log.path}:{line}" if line else log.path


def _meaning(code: int | None) -> str:
    """``: what the code means; the first move`` (and that sizing cannot fix it), or why there is none."""
    if code is None:
        return ""
    entry = ERROR_CODES.get(code)
    if entry is None:  # the code itself is named by its number before this
        return ": still a failure; read the host log and the device logs"
    text = f": {entry.meaning}; {entry.move}"
    if entry.resource is None and code != 11 and "ring size" not in text:  # 11: a capacity, but not a ring's
        text += " (not a ring size: bigger rings will not fix it)"
    return text


def _failed(s: RunSummary, log: HostLog) -> Finding:
    code = log.latched_code
    text = f"the host log reports {describe_log(log)} ({_where(log)})"
    if s.meta is None and s.records == 0:
        text += (". No scope_stats records exist for this run (the runtime's simulator writes none for a failed "
                 "run, nor does a process that dies in a hang)")
        if log.not_written:
            text += f"; the log says {log.not_written[0]} was not written"
    else:
        text += ", although the records show no scope left open"
    text += _meaning(code)
    return Finding("failed", "error", text, log.ring, None, None, code, None, True)


def _sizes_mismatch(meta: Meta, log: HostLog) -> list[Finding]:
    sizes = log.ring_sizes
    if sizes is None:
        return []
    diffs: list[str] = []
    for res in RESOURCES:
        from_meta, from_log = meta.maxes(res), sizes.of(res)
        for ring, (m, g) in enumerate(zip(from_meta, from_log, strict=False)):
            if m != g:
                diffs.append(f"ring {ring} {res} {fmt_amount(res, g)} in the log, {fmt_amount(res, m)} in the metadata")
    if not diffs:
        return []
    return [Finding("ring_sizes_mismatch", "warning",
                    f"the host log's 'Ring buffer sizes' line ({log.path}:{sizes.line}) and the metadata line "
                    f"disagree: {'; '.join(diffs)}: the log and the records may be from different runs")]


def _wedged(s: RunSummary, wedged: tuple[OpenScope, ...], th: Thresholds,
            usage: tuple[Usage | None, ...] | None, log: HostLog | None = None) -> Finding:
    inner = wedged[-1]
    code, peak, ratio = likely_error(s, inner, th, usage)
    log_code = log.latched_code if log is not None else None
    text = (f"run wedged in scope {inner.site} (depth {inner.depth}, ring {inner.ring}, begin at line "
            f"{inner.line}); {len(wedged)} scope(s) never closed")
    if code is not None:
        name, move = ERROR_CODES[code].name, ERROR_CODES[code].move
        own = usage[TASKS_AT] if usage is not None else None
        if code == 1 and own is not None and peak is not None:
            held = (f"the scope itself allocated {own.alloc} of the ring {inner.ring} task window's "
                    f"{peak.capacity} slots ({_pct(ratio)}) by the last sample")
        elif peak is not None:
            held = f"ring {inner.ring} {peak.resource} at {_pct(ratio)} of capacity at the last sample"
        else:
            held = f"tensormap at {_pct(ratio)} of capacity"
        text += f". Likely orch_error_code={code} {name} ({held}): {move}"
    elif peak is not None:  # a resource whose deadlock the runtime's enum does not name
        text += f". Ring {inner.ring} {peak.resource} at {_pct(ratio)} of capacity at the last sample"
    elif log_code is None:
        text += (f". No counter of ring {inner.ring} was near capacity at the last sample (it filled after it); "
                 f"look for orch_error_code= in the host log. Ring {inner.ring} capacities: "
                 f"{_capacities(s, inner.ring)}")
    else:
        text += f". No counter of ring {inner.ring} was near capacity at the last sample (it filled after it)"
    confirmed: bool | None = None
    if log is not None and log_code is not None:
        said = f"{describe_log(log)} ({_where(log)})"
        if code is None or code == log_code:
            confirmed = True
            text += f". {'Confirmed' if code == log_code else 'Named'} by the host log: {said}"
            if code is None:
                text += _meaning(log_code)
        else:
            confirmed = False
            text += (f". The host log disagrees: it says {said}, the records suggested orch_error_code={code} "
                     f"{ERROR_CODES[code].name}; the log is the runtime's own word")
            text += _meaning(log_code)
        if log.ring is not None and log.ring != inner.ring:
            text += f" (the log names ring {log.ring}, the innermost open scope is on ring {inner.ring})"
    elif log is not None and log.failed:
        text += f". The host log reports a failure without an error code: {describe_log(log)}"
    if s.meta is not None and not s.meta.fatal:
        text += '. "fatal" is false, as deadlocks leave it'
    resource = "tensormap" if code == 11 else peak.resource if peak else None
    fill = ratio if code else None
    if confirmed is not None and log_code != code:  # the log's code wins; the records' fill was another resource's
        code, fill, resource = log_code, None, None
    return Finding("wedged", "error", text, inner.ring, resource, inner.site, code, fill, confirmed)


def wedge_causes(s: RunSummary, findings: Sequence[Finding], th: Thresholds | None = None) -> tuple[WedgeCause, ...]:
    """One :class:`WedgeCause` per wedged scope of ``s`` (outermost first).

    The innermost takes the ``wedged`` finding's code, resource and fill (made with the same
    thresholds and host log, so every exporter says what ``summary`` says); the others
    :func:`likely_error` on their own ring.  Where nothing is full enough to blame, the fullest
    resource of the ring is still named (code None).
    """
    th = th or Thresholds()
    finding = next((f for f in findings if f.rule == "wedged"), None)
    out: list[WedgeCause] = []
    for i, w in enumerate(s.wedged):
        inner = i == len(s.wedged) - 1
        confirmed: bool | None = None
        if inner and finding is not None and finding.code is not None:
            code: int | None = finding.code
            resource = finding.resource
            fill = finding.fill or 0.0
            confirmed = finding.confirmed
            peak = next((p for p in s.peaks if p.ring == w.ring and p.resource == resource), None)
            if resource is None and peak is None:  # the log named the code; say which resource was fullest
                ring = [p for p in s.peaks if p.ring == w.ring and p.capacity]
                peak = max(ring, key=lambda p: p.live_ratio or 0.0) if ring else None
                resource = peak.resource if peak is not None else None
                fill = (peak.live_ratio or 0.0) if peak is not None else 0.0
        else:
            code, peak, fill = likely_error(s, w, th)
            resource = "tensormap" if code == 11 else peak.resource if peak is not None else None
            if inner and finding is not None:
                confirmed = finding.confirmed
        if code != 11 and resource is None:
            ring = [p for p in s.peaks if p.ring == w.ring and p.capacity]
            if ring:
                peak = max(ring, key=lambda p: p.live_ratio or 0.0)
                resource, fill = peak.resource, peak.live_ratio or 0.0
        out.append(WedgeCause(w.ring, resource, float(fill), code, confirmed))
    return tuple(out)
