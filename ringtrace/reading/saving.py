"""The app's ``saver`` task: restart state (``--state-dir``) that counts a run as finished only once
every sink took it.

:class:`Saver` is told of each batch handed to the sinks (``handed``) and of each finished run they all
took (``taken``); ``save()`` writes the tailer's snapshot with the runs handed but not yet taken still
open (on the reader thread, ``reader``: the tailer is the reader's).  ``run(done)`` saves soon
after a ``taken``, at most every :data:`SAVE_SECONDS`, until ``done`` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor

from ringtrace.model.records import RunFinished, SinkEvent
from ringtrace.reading.tail.state import State, Store
from ringtrace.reading.waits import wait_any

log = logging.getLogger("ringtrace.reading.app")  # the app's rooms log as the app

SAVE_SECONDS = 0.2
"""A kill -9 re-emits at most the runs finished in this window (sinks that see them again dedupe by
``RunFinished.key``)."""

RunId = tuple[str, int]


def run_id(fin: RunFinished) -> RunId:
    """How the state names a finished run until the sinks took it: (path, generation); (key, 0) for a
    run known from its host log alone (no path)."""
    return (fin.source.path or fin.key, fin.source.generation)


class Saver:
    """The restart state of one app, saved in ``store``; ``snapshot`` is the tailer's."""

    def __init__(self, store: Store, snapshot: Callable[[frozenset[RunId]], State], reader: Executor) -> None:
        self.store = store
        self._snapshot = snapshot
        self._reader = reader
        self._undelivered: set[RunId] = set()  # finished runs handed to the sinks, not yet taken by all
        self._soon = asyncio.Event()

    def handed(self, batch: Sequence[SinkEvent]) -> None:
        """``batch`` goes to the sinks: its finished runs stay open in the state until they took them."""
        for e in batch:
            if type(e) is RunFinished:
                self._undelivered.add(run_id(e))

    def taken(self, fin: RunFinished) -> None:
        """Every sink took ``fin``: it counts as finished in the next save, which comes soon."""
        self._undelivered.discard(run_id(fin))
        self._soon.set()

    async def save(self) -> None:
        """Save what a restart needs now (a failure is logged, never raised)."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._reader, self._write, frozenset(self._undelivered))
        except OSError as err:
            log.error("cannot save state in %s: %s", self.store.directory, err)

    def _write(self, undelivered: frozenset[RunId]) -> None:
        self.store.save(self._snapshot(undelivered))  # a failure is logged once per kind

    async def run(self, done: asyncio.Event) -> None:
        """Save soon after the sinks took a finished run (at most every SAVE_SECONDS), until ``done``."""
        while True:
            await wait_any(self._soon, done)
            if done.is_set():
                return
            self._soon.clear()
            await self.save()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAVE_SECONDS):
                    await done.wait()
