"""The sink contract: :class:`Sink`, the one base every output subclasses.

A sink is three methods, called from one thread at a time (its outlet's worker in ``watch``, the
caller of ``summary``/``check``, an outlet again in ``convert`` when a sink ``blocks``), in event order:

* :meth:`Sink.receive`: take one :class:`~ringtrace.model.records.SinkEvent`.  It should not raise
  (a failure is logged and counted by the fan-out, which carries on); events and the records inside
  them are immutable and may be kept.  A sink whose calls may wait on a network (``blocks = True``)
  is always delivered to through an outlet, so it holds up nobody but itself.
* :meth:`Sink.flush`: push out what is buffered, and return by ``deadline`` (a ``time.monotonic()``
  instant) at the latest: what cannot go out by then is given up (and counted by the sink).  Called
  at the end of a one-shot command and at shutdown (``--once`` exit, SIGTERM), where the deadline
  comes from the app's one shutdown budget, less :data:`~ringtrace.sinks.delivery.FLUSH_MARGIN`
  for ``close``.  The OpenTelemetry SDK's ``force_flush(timeout)``, with a deadline instead.
* :meth:`Sink.close`: release resources; no calls follow.

The optional hooks are methods of the base that do nothing; a sink overrides those it needs:

* :attr:`Sink.wants`: what the sink reads of :class:`~ringtrace.model.records.RunProgress`
  (records and pair events by default), and whether it reads a run's bands (``RunFinished.bands``, the
  report's).  When no sink of a fan-out wants records or pair events, the reader builds and queues none.
* :meth:`Sink.reopen`: open the output again at its path (SIGHUP, logrotate's ``postrotate``
  convention).  Only a sink that overrides it is asked (:meth:`Sink.can_reopen`).
* :meth:`Sink.dropped`: some events of ``source``'s run were dropped before reaching this sink (it was
  stuck); what it builds of that run is incomplete.
* :meth:`Sink.shutdown_begins`: called at once from the thread that starts the shutdown (not the
  sink's worker, which may be inside a call): the deadline its calls must end by from now on.  A sink
  that may block in ``receive`` (a network exporter retrying) cuts its waits there; the rest ignore it.

How events reach sinks (the fan-out, each sink's outlet, stuck sinks): :mod:`ringtrace.sinks.delivery`.
"""

from __future__ import annotations

from typing import ClassVar

from ringtrace.model.records import WANT_ALL, SinkEvent, Source, Wants


class Sink:
    """The base of every sink (see the module docstring).  ``name`` labels its counters and log lines."""

    name: str = "sink"
    wants: Wants = WANT_ALL
    blocks: ClassVar[bool] = False
    """Its calls may wait on a network: one-shot commands deliver to it through an outlet too."""

    def receive(self, event: SinkEvent) -> None:
        raise NotImplementedError

    def flush(self, deadline: float) -> None:
        """Nothing is buffered (the default)."""

    def close(self) -> None:
        """Nothing to release (the default)."""

    # -- optional hooks: no-ops unless overridden ------------------------------------------------

    def reopen(self) -> None:
        """Open the output again at its path (SIGHUP); the default has no output to reopen."""

    def dropped(self, source: Source) -> None:
        """Events of ``source``'s run were dropped before reaching this sink; the default ignores it."""

    def shutdown_begins(self, deadline: float) -> None:
        """Shutdown began (called from another thread): no call may go past ``deadline`` (``time.monotonic()``)."""

    @classmethod
    def can_reopen(cls) -> bool:
        """Whether the sink has an output to reopen (it overrides :meth:`reopen`)."""
        return cls.reopen is not Sink.reopen


def ringtrace_version() -> str:
    """The installed ringtrace's version, for build info and user agents ("unknown" from a bare source tree)."""
    try:
        from importlib.metadata import version

        return version("ringtrace")
    except Exception:  # not installed
        return "unknown"
