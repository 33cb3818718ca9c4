"""The sink contract and the fan-out.

A sink is three methods, called from one thread (the app's sink worker, or the caller of
``convert``/``summary``), in event order:

* ``receive(event)``: take one :class:`~ringtrace.records.SinkEvent`.  It must not block for
  long (no network round trips: hand those to an own worker) and should not raise; events
  and the records inside them are immutable and may be kept.
* ``flush()``: push out what is buffered (called before shutdown and at ``--once`` exit).
* ``close()``: release resources; no calls follow.

A sink may say what it reads of :class:`~ringtrace.records.RunProgress` with a ``wants``
attribute (a :class:`~ringtrace.records.Wants`); without one it gets everything.  When no sink of a
fan-out wants records or pair events, the reader builds and queues none (:attr:`FanOut.wants`).

:class:`FanOut` delivers each event to every sink and survives a failing one: the failure is
logged and counted per sink (each error of an :class:`ExceptionGroup` counts), and the other
sinks and the reader carry on.  A sink that cannot write an output raises, so it is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from ringtrace.records import WANT_ALL, SinkEvent, Wants

log = logging.getLogger("ringtrace.sinks")


def ringtrace_version() -> str:
    """The installed ringtrace's version, for build info and user agents ("unknown" from a bare source tree)."""
    try:
        from importlib.metadata import version

        return version("ringtrace")
    except Exception:  # not installed
        return "unknown"


class Sink(Protocol):
    """See the module docstring for the contract."""

    name: str

    def receive(self, event: SinkEvent) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class FanOut:
    """Delivers to many sinks; counts and logs each sink's failures (``errors[name]``)."""

    name = "fanout"

    def __init__(self, sinks: Sequence[Sink]) -> None:
        self.sinks = list(sinks)
        self.errors: dict[str, int] = {s.name: 0 for s in self.sinks}

    def add(self, sink: Sink) -> None:
        """Add a sink before the first event (used while wiring the app)."""
        self.sinks.append(sink)
        self.errors.setdefault(sink.name, 0)

    @property
    def wants(self) -> Wants:
        """What any of the sinks reads of RunProgress (the union of their ``wants``)."""
        each = [getattr(s, "wants", WANT_ALL) for s in self.sinks]
        return Wants(any(w.records for w in each), any(w.events for w in each))

    def _guard(self, sink: Sink, what: str, event: SinkEvent | None = None) -> None:
        try:
            if event is None:
                getattr(sink, what)()
            else:
                sink.receive(event)
        except Exception as err:  # a sink's bug must not stop the reader or the other sinks
            # an ExceptionGroup is several failures at once (e.g. traces of several runs): each counts
            for one in err.exceptions if isinstance(err, ExceptionGroup) else (err,):
                self.errors[sink.name] = self.errors.get(sink.name, 0) + 1
                log.error("sink %s failed in %s: %s", sink.name, what, one, exc_info=log.isEnabledFor(logging.DEBUG))

    def receive(self, event: SinkEvent) -> None:
        for sink in self.sinks:
            self._guard(sink, "receive", event)

    def receive_all(self, events: Iterable[SinkEvent]) -> None:
        for event in events:
            self.receive(event)

    def flush(self) -> None:
        for sink in self.sinks:
            self._guard(sink, "flush")

    def close(self) -> None:
        for sink in self.sinks:
            self._guard(sink, "close")
