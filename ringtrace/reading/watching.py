"""The app's ``watcher`` task: file-system events over the directories the tailer names, as a set of
changed paths and a wake-up for the reader.

:class:`Watch` watches the current watch points (``set_points`` after each scan) with inotify, one
watch per directory (:class:`~ringtrace.reading.tail.inotify.TreeWatcher`), or with watchfiles'
polling watcher (``--poll``, or when inotify is unavailable: ``polling`` turns True).  It adds the
paths that changed to ``dirty`` and sets ``wake``; after an inotify queue overflow (events lost) it
sets ``rescan_due`` too.  Everything runs in the app's event loop; ``tree``'s counts are plain ints
that any thread may read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from ringtrace.reading.tail.inotify import TreeWatcher
from ringtrace.reading.waits import wait_any

log = logging.getLogger("ringtrace.reading.app")  # the app's rooms log as the app
_T = TypeVar("_T")


class Watch:
    """The file-system watch of one app; ``run()`` is its task, until ``stopping`` is set."""

    tree: TreeWatcher | None = None
    """The inotify watcher while one runs (its counts stay readable after it stops)."""

    def __init__(self, wake: asyncio.Event, stopping: asyncio.Event, *, poll: bool, poll_interval: float,
                 rescan_interval: float) -> None:
        self.polling = poll
        self.dirty: set[str] = set()  # paths reported since the reader last took them
        self.rescan_due = False  # events were lost: the reader rescans at once (and clears this)
        self.watching = asyncio.Event()  # the current watch points are watched
        self._wake = wake
        self._stopping = stopping
        self._poll_interval = poll_interval
        self._rescan_interval = rescan_interval  # a failed polling watcher is started again after this
        self._points: list[tuple[Path, bool]] = []
        self._points_changed = asyncio.Event()
        self._rewatch_due = False  # the whole tree is walked again before the next wait for events

    def set_points(self, points: list[tuple[Path, bool]]) -> None:
        """After a scan: the directories to watch, each with whether its subdirectories are watched too.
        At the watch limit the tree is also walked again, for watches freed meanwhile."""
        if points != self._points:
            self._points = points
            self.watching.clear()
            self._points_changed.set()
        if self.tree is not None and self.tree.degraded:
            self._rewatch_due = True
            self._points_changed.set()

    def take_dirty(self) -> set[str]:
        """The paths reported since the last call (the reader hands them to the tailer)."""
        dirty, self.dirty = self.dirty, set()
        return dirty

    async def run(self) -> None:
        """File-system events (inotify, one watch per directory) over the current watch points.

        Polling (``--poll``, or when inotify is unavailable) is watchfiles' polling watcher, which
        also notices new files and directories.  A watcher that fails is logged and started again
        after the next rescan; reading goes on meanwhile (rescans find what events would have).
        The inotify watcher's directory walks run on a thread of their own (``ringtrace-watcher``), so
        neither the loop nor a long read on the reader thread holds them up.
        """
        if not self.polling:
            pool = ThreadPoolExecutor(1, thread_name_prefix="ringtrace-watcher")
            loop = asyncio.get_running_loop()

            async def offload(fn: Callable[[], _T]) -> _T:
                return await loop.run_in_executor(pool, fn)

            try:
                try:
                    tree = TreeWatcher(self._changed, self._overflow, offload)
                except OSError as err:
                    log.warning("file-system events unavailable (%s); polling every %.2fs instead", err,
                                self._poll_interval)
                    self.polling = True
                else:
                    self.tree = tree
                    try:
                        await self._inotify(tree)
                    finally:
                        tree.close()
                    return
            finally:
                pool.shutdown(wait=False)
        await self._polling()

    async def _inotify(self, tree: TreeWatcher) -> None:
        while not self._stopping.is_set():
            self._points_changed.clear()
            await tree.set_points(list(self._points))
            if self._rewatch_due:
                self._rewatch_due = False
                await tree.rewatch()
            self.watching.set()
            await tree.run(self._points_changed, self._stopping)  # returns when the points change or on stop

    def _changed(self, path: str) -> None:
        self.dirty.add(path)
        self._wake.set()

    def _overflow(self) -> None:
        self.rescan_due = True
        self._wake.set()

    async def _polling(self) -> None:
        while not self._stopping.is_set():
            self._points_changed.clear()
            points = list(self._points)
            if not points:
                self.watching.set()
                await wait_any(self._points_changed, self._stopping)
                continue
            # watchfiles sets the stop event it was given when its task is cancelled: give it its own
            round_over = asyncio.Event()
            try:
                async with asyncio.TaskGroup() as tg:
                    for recursive in (True, False):
                        dirs = [str(p) for p, rec in points if rec is recursive]
                        if dirs:
                            tg.create_task(self._poll_dirs(dirs, recursive, round_over))
                    self.watching.set()
                    await wait_any(self._points_changed, self._stopping)
                    round_over.set()  # ends this round's watch loops; the next round watches the new points
            except* Exception as group:  # a name that is not UTF-8, a directory it may not read...
                log.warning("polling watcher failed (%s); relying on rescans until the next one, then polling again",
                            group.exceptions[0])
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._rescan_interval):
                        await wait_any(self._points_changed, self._stopping)

    async def _poll_dirs(self, dirs: list[str], recursive: bool, stop: asyncio.Event) -> None:
        import watchfiles  # --poll only

        async for changes in watchfiles.awatch(*dirs, recursive=recursive, debounce=50, step=10,
                                               watch_filter=None, stop_event=stop, force_polling=True,
                                               poll_delay_ms=max(1, int(1000 * self._poll_interval))):
            for _change, path in changes:
                self.dirty.add(path)
            self._wake.set()
