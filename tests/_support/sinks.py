"""The one test sink: keeps every event it receives (or, with ``keep=False``, only counts records).

Views by source path for the tests that need them: ``seen`` (``RunStarted.seen_at``), ``scopes``
(paired scopes), ``last_line`` (the last record's line, 1 before any), ``finished``
(``RunFinished``); ``records`` is every record in order.  The views are computed from ``events``.
:class:`Stepping` is a slow one: it takes one event per step the test gives.
"""

from __future__ import annotations

import threading

from ringtrace.model.records import Record, RunFinished, RunProgress, RunStarted, Scope, SinkEvent
from ringtrace.sinks import Sink


class Collect(Sink):
    """A sink (``receive``/``flush``/``close``) for tests and benchmarks; see the module docstring."""

    def __init__(self, name: str = "collect", keep: bool = True) -> None:
        self.name = name
        self.keep = keep
        self.events: list[SinkEvent] = []
        self.record_count = 0

    def receive(self, event: SinkEvent) -> None:
        if type(event) is RunProgress:
            self.record_count += len(event.records)
        if self.keep:
            self.events.append(event)

    def flush(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        pass

    @property
    def records(self) -> list[Record]:
        return [r for e in self.events if isinstance(e, RunProgress) for r in e.records]

    @property
    def finished(self) -> dict[str, RunFinished]:
        return {e.source.path: e for e in self.events if isinstance(e, RunFinished)}

    @property
    def seen(self) -> dict[str, float]:
        return {e.source.path: e.seen_at for e in self.events if isinstance(e, RunStarted)}

    @property
    def scopes(self) -> dict[str, list[Scope]]:
        out: dict[str, list[Scope]] = {}
        for e in self.events:
            if isinstance(e, RunStarted):
                out[e.source.path] = []  # a new run of the path starts afresh
            elif isinstance(e, RunProgress):
                out.setdefault(e.source.path, []).extend(x for x in e.events if isinstance(x, Scope))
        return out

    @property
    def last_line(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            if isinstance(e, RunStarted):
                out[e.source.path] = 1
            elif isinstance(e, RunProgress) and e.records:
                out[e.source.path] = e.records[-1].line
        return out


class Stepping(Collect):
    """A :class:`Collect` that takes one event per :meth:`step` (its worker waits in ``receive`` meanwhile)."""

    def __init__(self, name: str = "stepping") -> None:
        super().__init__(name)
        self._permits = threading.Semaphore(0)

    def receive(self, event: SinkEvent) -> None:
        self._permits.acquire()
        super().receive(event)

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self._permits.release()
