"""Chrome JSON trace events with the protobuf trace's layout (``--perfetto-format chrome-json``)."""

from __future__ import annotations

import json

from ringtrace.model.records import (
    RESOURCES,
    Abandoned,
    OpenScope,
    RunFinished,
    RunProgress,
    RunStarted,
    Scope,
    SinkEvent,
    Source,
)
from ringtrace.model.runtime import TABLE as RESOURCE_TABLE

from ._file import TraceFile
from ._layout import (
    JSON_TIME_AXIS,
    RingState,
    RunState,
    event_line,
    present,
    process_name,
    sort_key,
    verdict_kind,
    verdict_span,
)

VERDICT_TID = 99
"""The thread of a run's verdict slice (rings are threads 1-4)."""


class JsonTrace:
    """The same layout as Chrome JSON trace events (``B``/``E`` slices, ``C`` counters, ``M`` names).

    Written as events come into a :class:`TraceFile` made with ``compress=False`` (the array is
    closed by :meth:`close`), but it is ~350 bytes per record, ~25x the protobuf trace, and
    Perfetto's JSON importer holds the whole trace in memory: meant for small traces.  1 us of
    trace time is one record (``ts`` = line number).
    """

    def __init__(self, out: TraceFile, defer_processes: bool = False) -> None:
        self.out = out
        self.defer = defer_processes
        self.runs: dict[Source, RunState] = {}
        self.done: list[RunState] = []
        self._next = 0
        self._first = True
        self.records = 0
        out.parts.append(b'{"displayTimeUnit": "ns", "traceEvents": [\n')

    def _emit(self, obj: dict[str, object]) -> None:
        self.out.parts.append((("" if self._first else ",\n") + json.dumps(obj, separators=(",", ":"))).encode())
        self._first = False

    def receive(self, event: SinkEvent) -> None:
        run = self.runs.get(event.source)
        if run is None:
            meta = event.meta if isinstance(event, RunStarted) else (
                event.summary.meta if isinstance(event, RunFinished) else None)
            self._next += 1
            run = self.runs[event.source] = RunState(event.source, meta, self._next, 0)
        if isinstance(event, RunStarted) and run.meta is None:
            run.meta = event.meta
        elif isinstance(event, RunProgress):
            self._progress(run, event)
            if event.summary is not None:
                run.open = event.summary.open
        elif isinstance(event, RunFinished):
            self._finish(run, event)
        self.out.spill()

    def _progress(self, run: RunState, ev: RunProgress) -> None:
        pid = run.uuid
        emit = self._emit
        events = ev.events
        ei, ne = 0, len(events)
        self.records += len(ev.records)
        for rec in ev.records:
            line = rec.line
            if rec.ring not in run.rings:
                run.rings[rec.ring] = RingState(rec.ring, b"", 0, present(rec))
                emit({"ph": "M", "pid": pid, "tid": rec.ring + 1, "name": "thread_name",
                      "args": {"name": f"ring {rec.ring} scopes (1 us = 1 record)"}})
                emit({"ph": "M", "pid": pid, "tid": rec.ring + 1, "name": "thread_sort_index",
                      "args": {"sort_index": rec.ring}})
            closing: Scope | None = None
            while ei < ne and event_line(pe := events[ei]) == line:  # the events this record caused
                if isinstance(pe, Scope):
                    closing = pe
                elif isinstance(pe, Abandoned):
                    self._end(run, pe.scope, line, "unmatched_begin")
                ei += 1
            if rec.phase == "begin":
                emit({"ph": "B", "pid": pid, "tid": rec.ring + 1, "ts": line, "name": rec.site})
            elif closing is not None:
                args: dict[str, object] = {"depth": closing.depth, "line": closing.begin_line}
                for res, u in zip(RESOURCES, closing.usage, strict=False):
                    if u is not None:
                        args.update({f"{res}_high_water": u.high_water, f"{res}_live_at_exit": u.live_at_exit,
                                     f"{res}_alloc": u.alloc})
                if closing.begin_ring is None:
                    emit({"ph": "E", "pid": pid, "tid": rec.ring + 1, "ts": line, "args": args})
                else:  # its begin is on another ring (odd data): end it there
                    self._end(run, OpenScope(closing.site, closing.depth, closing.begin_ring, closing.begin_line),
                              line, "")
            live = {r.name: head - (getattr(rec, r.start_field) or 0) for r in RESOURCE_TABLE
                    if (head := getattr(rec, r.end_field)) is not None}
            emit({"ph": "C", "pid": pid, "ts": line, "name": f"ring {rec.ring}", "args": live})
            caps = {res: run.meta.capacity(res, rec.ring) for res in live} if run.meta is not None else {}
            if caps and all(caps.values()):  # use % of capacity beside the absolute counters
                emit({"ph": "C", "pid": pid, "ts": line, "name": f"ring {rec.ring} use %",
                      "args": {res: 100 * v // (caps[res] or 1) for res, v in live.items()}})
            emit({"ph": "C", "pid": pid, "ts": line, "name": "tensormap", "args": {"entries": rec.tensormap}})
        if ev.records:
            run.last_line = ev.records[-1].line

    def _end(self, run: RunState, scope: OpenScope, at: int, flag: str) -> None:
        args: dict[str, object] = {"depth": scope.depth, "line": scope.line}
        if flag:
            args[flag] = True
        self._emit({"ph": "E", "pid": run.uuid, "tid": scope.ring + 1, "ts": at, "args": args})

    def _finish(self, run: RunState, fin: RunFinished | None) -> None:
        """As the protobuf trace's: the pairer's open scopes end at the final tick (:meth:`RunState.finish`)."""
        opened, wedged, at = run.finish(fin, "1 us")
        if wedged and fin is not None and opened:
            inner = opened[-1]
            wargs: dict[str, object] = {"depth": inner.depth, "line": inner.line}
            if fin.verdict.code is not None:
                wargs["orch_error_code"] = fin.verdict.code
            self._emit({"ph": "i", "s": "t", "pid": run.uuid, "tid": inner.ring + 1, "ts": at, "name": "WEDGED",
                        "args": wargs})
        if fin is not None:  # the verdict on a track of its own, first in the process (as the protobuf trace's)
            v = fin.verdict
            start, end = verdict_span(v, at)
            vargs: dict[str, object] = {"verdict_kind": v.kind, "verdict_severity": v.severity, "verdict_text": v.text}
            if v.code is not None:
                vargs["orch_error_code"] = v.code
            self._emit({"ph": "M", "pid": run.uuid, "tid": VERDICT_TID, "name": "thread_name",
                        "args": {"name": verdict_kind(v)}})
            self._emit({"ph": "M", "pid": run.uuid, "tid": VERDICT_TID, "name": "thread_sort_index",
                        "args": {"sort_index": -1}})
            self._emit({"ph": "X", "pid": run.uuid, "tid": VERDICT_TID, "ts": start, "dur": end - start,
                        "args": vargs, "name": v.short})
        for scope in reversed(opened):
            self._end(run, scope, at, "wedged" if wedged else "open_at_close")
        del self.runs[run.source]
        self.done.append(run)
        if not self.defer:
            self._processes()

    def _processes(self) -> None:
        for rank, run in enumerate(sorted(self.done, key=lambda r: sort_key(r.source))):
            pid = run.uuid
            self._emit({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": process_name(run.source)}})
            self._emit({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": rank}})
            self._emit({"ph": "M", "pid": pid, "name": "process_labels", "args": {"labels": ", ".join(run.labels)}})
            self._emit({"ph": "i", "s": "p", "pid": pid, "tid": 0, "ts": 1, "name": "run",
                        "args": {"description": run.description}})
        self.done.clear()

    def close(self) -> None:
        for run in list(self.runs.values()):
            self._finish(run, None)
        self._processes()
        self.out.parts.append(f'\n], "metadata": {{"ringtrace": {json.dumps(JSON_TIME_AXIS)}}}}}\n'.encode())
