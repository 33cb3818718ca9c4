"""The live :class:`~ringtrace.reading.app.App` in-process, in a thread of its own, with an injected clock.

:class:`AppThread` runs ``app.run()`` in a new event loop on a daemon thread, so the test's own thread
waits on conditions (:func:`tests._support.writer.wait_for`) instead of sleeping in the app's loop;
:meth:`AppThread.stop` is SIGTERM's ``app.stop()``, called in that loop.  :class:`Clock` is a monotonic
clock the test moves by hand (``App(clock=...)``): what the app decides by time (idle runs, stuck sinks)
follows it, while its wake-ups stay real.
"""

from __future__ import annotations

import asyncio
import threading

from ringtrace.reading.app import App

JOIN_TIMEOUT = 60.0
"""How long :meth:`AppThread.stop` waits for the app to end (a deadline, not a pause)."""


class Clock:
    """A monotonic clock the test moves (``now``); read from the app's threads."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class AppThread:
    """``app.run()`` on a thread with its own event loop; see the module docstring."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.code: int | None = None
        self.error: BaseException | None = None
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="test-app", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.code = self.loop.run_until_complete(self.app.run())
        except BaseException as err:  # reported by stop()
            self.error = err
        finally:
            self.loop.close()

    def stop(self) -> int:
        """``app.stop()`` in its loop, then wait for the end; the exit code (the app's exception is raised)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.app.stop)
        self.thread.join(JOIN_TIMEOUT)
        assert not self.thread.is_alive(), f"the app did not end within {JOIN_TIMEOUT}s of its stop"
        if self.error is not None:
            raise self.error
        assert self.code is not None
        return self.code
