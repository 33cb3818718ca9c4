"""Chrome JSON trace events with the protobuf trace's layout (``--perfetto-format chrome-json``)."""

from __future__ import annotations

import json
from typing import IO

from ringtrace.records import RESOURCES, Abandoned, RunFinished, RunProgress, RunStarted, Scope, SinkEvent, Source

from ._trace_writer import JSON_TIME_AXIS, RingState, RunState, process_name, run_status, sort_key


class JsonTrace:
    """The same layout as Chrome JSON trace events (``B``/``E`` slices, ``C`` counters, ``M`` names).

    Written as events come (the array is closed by :meth:`close`; the dir sink keeps a run's
    text in memory until the run ends), but it is ~350 bytes per record, ~25x the protobuf
    trace, and Perfetto's JSON importer holds the whole trace in memory: meant for small
    traces.  1 us of trace time is one record (``ts`` = line number).
    """

    def __init__(self, out: IO[str], defer_processes: bool = False) -> None:
        self.fh = out
        self.defer = defer_processes
        self.runs: dict[Source, RunState] = {}
        self.done: list[RunState] = []
        self._next = 0
        self._first = True
        self.records = 0
        out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')

    def _emit(self, obj: dict[str, object]) -> None:
        self.fh.write(("" if self._first else ",\n") + json.dumps(obj, separators=(",", ":")))
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
        elif isinstance(event, RunFinished):
            self._finish(run, event)

    def _progress(self, run: RunState, ev: RunProgress) -> None:
        pid = run.uuid
        emit = self._emit
        events = ev.events
        ei, ne = 0, len(events)
        self.records += len(ev.records)
        for rec in ev.records:
            line = rec.line
            if rec.ring not in run.rings:
                run.rings[rec.ring] = RingState(rec.ring, b"", 0, rec.dep_pool_end is not None)
                emit({"ph": "M", "pid": pid, "tid": rec.ring + 1, "name": "thread_name",
                      "args": {"name": f"ring {rec.ring}"}})
                emit({"ph": "M", "pid": pid, "tid": rec.ring + 1, "name": "thread_sort_index",
                      "args": {"sort_index": rec.ring}})
            closing: Scope | None = None
            while ei < ne:
                pe = events[ei]
                if isinstance(pe, Scope):
                    if pe.end_line != line:
                        break
                    closing = pe
                elif isinstance(pe, Abandoned):
                    if pe.line != line:
                        break
                    self._end_open(run, pe.scope.line, line, "unmatched_begin")
                elif pe.line != line:  # UnmatchedEnd
                    break
                ei += 1
            if rec.phase == "begin":
                run.stack.append((line, rec.ring, rec.site, rec.depth))
                emit({"ph": "B", "pid": pid, "tid": rec.ring + 1, "ts": line, "name": rec.site})
            elif closing is not None:
                args: dict[str, object] = {"depth": closing.depth, "line": closing.begin_line}
                for res, u in zip(RESOURCES, closing.usage, strict=False):
                    if u is not None:
                        args.update({f"{res}_high_water": u.high_water, f"{res}_live_at_exit": u.live_at_exit,
                                     f"{res}_alloc": u.alloc})
                if run.stack and run.stack[-1][0] == closing.begin_line:
                    run.stack.pop()
                    emit({"ph": "E", "pid": pid, "tid": rec.ring + 1, "ts": line, "args": args})
                else:
                    self._end_open(run, closing.begin_line, line, "")
            live = {"task_window": rec.task_window_end - rec.task_window_start, "heap": rec.heap_end - rec.heap_start}
            if rec.dep_pool_end is not None:
                live["dep_pool"] = rec.dep_pool_end - (rec.dep_pool_start or 0)
            emit({"ph": "C", "pid": pid, "ts": line, "name": f"ring {rec.ring}", "args": live})
            emit({"ph": "C", "pid": pid, "ts": line, "name": "tensormap", "args": {"entries": rec.tensormap}})
        if ev.records:
            run.last_line = ev.records[-1].line

    def _end_open(self, run: RunState, begin_line: int, at: int, flag: str) -> None:
        stack = run.stack
        idx = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == begin_line), None)
        if idx is None:
            return
        while len(stack) > idx:
            line, r, _site, depth = stack.pop()
            args: dict[str, object] = {"depth": depth, "line": line}
            if flag:
                args[flag] = True
            self._emit({"ph": "E", "pid": run.uuid, "tid": r + 1, "ts": at, "args": args})

    def _finish(self, run: RunState, fin: RunFinished | None) -> None:
        if run.stack:
            at = run.last_line + 1
            line, r, _site, depth = run.stack[-1]
            if fin is not None:
                wargs: dict[str, object] = {"depth": depth, "line": line}
                if fin.wedge_causes and fin.wedge_causes[-1].code is not None:
                    wargs["orch_error_code"] = fin.wedge_causes[-1].code
                self._emit({"ph": "i", "s": "t", "pid": run.uuid, "tid": r + 1, "ts": at, "name": "WEDGED",
                            "args": wargs})
            self._end_open(run, run.stack[0][0], at, "wedged" if fin is not None else "open_at_close")
        if fin is not None and fin.summary.meta is not None:
            run.meta = fin.summary.meta
        run.labels, run.description = run_status(run.source, run.meta, fin, "1 us")
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
        self.fh.write(f'\n], "metadata": {{"ringtrace": {json.dumps(JSON_TIME_AXIS)}}}}}\n')
