"""One verdict per run, made once, from what its records and host log prove.  Pure.

Decided in this order (the first that holds):

1. ``unknown`` (info) — the run did not end by itself (the agent stopped);
2. ``wedged`` (error) — every record read and scopes left open: the innermost open scope, its ring and the
   code (the host log's, else the likely one from the counters);
3. ``failed`` (error) — the host log reports a failure;
4. ``cut_short`` (error) — fewer records than the metadata promises (``total - dropped``), or the file went
   away under the reader: no wedge site, no guessed code;
   ``failed`` (error) again when the metadata says ``"fatal": true``; then ``cut_short`` again for a file
   with a metadata line and no record (the runtime writes the root scope's begin first: never a completed run);
5. ``test_failed`` (error) — completed, but the scene test failed on numbers: the sizes sufficed;
6. ``unknown`` — nothing to judge (no metadata line; a log alone that reports no failure), or records were
   dropped: the run's end cannot be told from its records (warning);
7. ``no_headroom`` / ``near_capacity`` (warning) — completed, and the records prove a need at / near a
   ring's capacity (``ringtrace.stages.need``; never occupancy);
8. ``healthy`` (ok) — completed, no proven need near capacity.  A ring that wrapped and reclaimed is no
   finding: reclaim is lazy (the allocator reclaims only when it has to wait), so a wrap says nothing of headroom.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringtrace.config import Thresholds
from ringtrace.model.records import Finding, HostLog, RunSummary, Verdict, VerdictKind, WedgeCause
from ringtrace.model.runtime import error_name, fmt_amount, sizing_resource
from ringtrace.stages.diagnose import describe_log
from ringtrace.stages.need import proven_need


def verdict_of(s: RunSummary, findings: Sequence[Finding], host_log: HostLog | None = None,
               cause: WedgeCause | None = None, stopped: bool = False, near: float = Thresholds().near) -> Verdict:
    """The verdict on a run (see the module docstring).  ``findings`` are ``diagnose``'s for the same run,
    ``cause`` the innermost wedged scope's (the last of ``RunFinished.wedge_causes``), ``stopped`` that the
    agent stopped before the run ended (shutdown), ``near`` the near-capacity share (``Thresholds.near``)."""
    meta = s.meta
    by_rule = {f.rule: f for f in findings}
    if stopped:
        return Verdict("unknown", "info", f"not finished when the reader stopped ({s.records} records read)")
    if s.wedged:
        return _wedged(s, by_rule.get("wedged"), host_log, cause)
    if host_log is not None and host_log.failed:
        return _failed(host_log)
    if "cut_short" in by_rule:
        missing = f", {s.missing} of its records missing" if s.missing else ""
        return Verdict("cut_short", "error", f"cut short{missing}: the file is cut or was still being written; "
                                             "no verdict on the run itself")
    if meta is not None and meta.fatal:
        return Verdict("failed", "error", 'failed: a fatal was latched ("fatal": true)')
    if meta is not None and not s.records:
        return Verdict("cut_short", "error", "no scope records, a metadata line only: the file is cut or was "
                                             "still being written; no verdict on the run itself")
    if host_log is not None and host_log.test_failure is not None:
        return Verdict("test_failed", "error", f"completed, but the test failed on numbers: "
                                               f"{host_log.test_failure}; the sizes sufficed (not a ring problem)")
    if meta is None:
        if s.records or host_log is None:
            return Verdict("unknown", "warning", "not assessed: the metadata line could not be read")
        return Verdict("unknown", "info", "no scope_stats file; the host log reports no failure")
    if meta.dropped > 0:
        return Verdict("unknown", "warning", f"{meta.dropped} records dropped: the run's end cannot be told from "
                                             "its records (peaks are lower bounds)")
    return _completed(s, near)


def _wedged(s: RunSummary, finding: Finding | None, log: HostLog | None, cause: WedgeCause | None) -> Verdict:
    inner = s.wedged[-1]
    code = cause.code if cause is not None else None
    if log is not None and log.failed and log.failure_code is not None:
        code = log.failure_code
    name = (log.failure_name if log is not None and code == log.failure_code else None) or error_name(code)
    how = "" if code is None else (f": {name or f'code {code}'}" if log is not None and log.failed else
                                   f": likely {name or f'code {code}'}")
    resource = sizing_resource(code) or (cause.resource if cause is not None else None)
    text = f"wedged in {inner.site} (depth {inner.depth}, ring {inner.ring}, line {inner.line}){how}"
    if code is None and finding is not None:
        text += ": no counter of its ring was near capacity at the last sample"
    return Verdict("wedged", "error", text, inner.ring, resource, inner.site, code, name, inner.line)


def _failed(log: HostLog) -> Verdict:
    code = log.failure_code
    d = log.deadlock
    resource = (d.resource if d is not None else None) or sizing_resource(code)
    fixable = "" if code is None or sizing_resource(code) is not None or code == 11 else \
        ": not a ring size (bigger rings will not fix it)"
    return Verdict("failed", "error", f"failed: {describe_log(log)}{fixable}", log.ring, resource, None, code,
                   log.failure_name, d.line if d is not None else 0)


def _completed(s: RunSummary, near: float) -> Verdict:
    best: tuple[float, int, str, int, int, str] | None = None  # ratio, ring, resource, need, capacity, why
    for p in s.peaks:
        if p.capacity is None or not p.scopes:
            continue
        need = proven_need(p, s)
        if need.value and (best is None or need.value / p.capacity > best[0]):
            best = (need.value / p.capacity, p.ring, p.resource, need.value, p.capacity, need.why)
    if best is not None and best[0] >= near:
        ratio, ring, resource, value, cap, why = best
        kind: VerdictKind = "no_headroom" if value >= cap else "near_capacity"
        amount = f"{fmt_amount(resource, value)} of {fmt_amount(resource, cap)}"
        text = (f"completed with no headroom on ring {ring} {resource}: a proven need of {amount} ({why})"
                if kind == "no_headroom" else
                f"completed near capacity on ring {ring} {resource}: a proven need of {amount} "
                f"({100 * ratio:.0f}%; {why})")
        return Verdict(kind, "warning", text, ring, resource)
    text = "completed"
    if best is not None:
        text += (f"; largest proven need: ring {best[1]} {best[2]} {fmt_amount(best[2], best[3])} of "
                 f"{fmt_amount(best[2], best[4])} ({100 * best[0]:.0f}%)")
    return Verdict("healthy", "ok", text, best[1] if best else None, best[2] if best else None)
