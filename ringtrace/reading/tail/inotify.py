"""File-system events from Linux inotify (asyncinotify): one watch per directory, faults kept per directory.

:class:`TreeWatcher` watches the app's watch points (``(directory, recursive)``): a recursive
point gets a watch on every directory below it, added as directories appear.  Why not one
recursive watch from a library: a directory the process may not read, a name that is not
UTF-8, or the inotify watch limit must cost that directory its events, not stop the watcher.

* a directory that cannot be watched (EACCES, vanished) is logged once and skipped; its files
  are still found by the app's rescans;
* the watch limit (ENOSPC, ``fs.inotify.max_user_watches``) is logged once: directories past it
  are covered by rescans only (``degraded``); the next walk of the whole tree tries them again;
* symbolic links below a point are never followed; names are bytes underneath (paths are str
  with surrogate escapes, as ``os.fsdecode`` gives them);
* a kernel queue overflow loses events, among them the creation of directories that then have
  no watch: the whole tree is walked again and every directory without a watch gets one
  (``rewatched``), then ``on_overflow`` is called (the app rescans);
* a directory renamed within the tree (``mv run_a run_b``): its watches (and those below it) are
  dropped at ``IN_MOVED_FROM`` and added again at ``IN_MOVED_TO`` under the new name, and the new
  name is reported through ``on_change`` (the tailer follows the files there); one moved in from
  outside is watched like a new one.

Counts, for the metrics: ``watched`` (directories with a watch), ``unwatched`` (directories found
by the walks that have none: the watch limit, permissions), ``rewatched`` (watches added by the
walks after an overflow), ``overflows``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from asyncinotify import Event, Inotify, Mask, Watch

log = logging.getLogger("ringtrace.reading.tail")

MASK = (Mask.CREATE | Mask.MODIFY | Mask.CLOSE_WRITE | Mask.DELETE | Mask.MOVED_FROM | Mask.MOVED_TO
        | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.ONLYDIR)
_NEW_DIR = Mask.CREATE | Mask.MOVED_TO
_T = TypeVar("_T")

Offload = Callable[[Callable[[], _T]], Awaitable[_T]]


async def _to_thread(fn: Callable[[], _T]) -> _T:
    return await asyncio.to_thread(fn)


class TreeWatcher:
    """inotify watches over the app's watch points, and the events they send.

    Who calls, on which thread: the app's watcher task (the event loop) constructs it, awaits
    :meth:`set_points` and :meth:`run`, and calls :meth:`close`.  ``on_change``, ``on_overflow`` are
    called on the loop, from :meth:`run`.  Every directory walk and ``inotify_add_watch`` (the points,
    a new or moved-in directory, the walk after an overflow) runs through ``offload`` (the app gives
    its watcher thread; by default a worker thread): :meth:`run` awaits each walk before it takes the
    next event, so a walk and the event handling never run at the same time and only one of them
    touches the tables at a time (``inotify_rm_watch``, which looks up no path, may run on the loop).
    The kernel keeps queuing events meanwhile.  The counts (``watched``,
    ``unwatched``, ``rewatched``, ``overflows``) are plain ints, read by the metrics render thread.

    Owns: the inotify instance and its watches, the table of watched directories (path -> watch,
    whether its subdirectories are watched too), the directories it could not watch.
    """

    def __init__(self, on_change: Callable[[str], None], on_overflow: Callable[[], None],
                 offload: Offload[object] | None = None) -> None:
        self.on_change = on_change
        self.on_overflow = on_overflow
        self._offload: Offload[object] = offload or _to_thread
        self._inotify = Inotify()  # OSError when inotify is unavailable: the caller polls instead
        self._recursive: dict[Path, bool] = {}  # watched directory -> its subdirectories are watched too
        self._watches: dict[Path, Watch] = {}
        self._wd_path: dict[int, Path] = {}  # watch descriptor -> the directory it is in the table for
        self._refused: set[Path] = set()  # logged once
        self._unwatched: set[Path] = set()  # found by a walk, no watch (limit, permissions)
        self._points: list[tuple[Path, bool]] = []
        self._closed = False
        self.degraded = False
        self.rewatched = 0
        self.overflows = 0

    @property
    def watched(self) -> int:
        return len(self._watches)

    @property
    def unwatched(self) -> int:
        return len(self._unwatched)

    def close(self) -> None:
        self._closed = True  # a walk still running on the offload thread stops at its next directory
        self._inotify.close()

    async def set_points(self, points: list[tuple[Path, bool]]) -> None:
        """Watch ``points`` (adding what is new; directories no longer wanted keep their watch until gone)."""
        await self._walk_off_loop(partial(self._set_points, points))

    def _set_points(self, points: list[tuple[Path, bool]]) -> list[Path]:
        self._points = [(d.absolute(), rec) for d, rec in points]
        for directory, recursive in self._points:
            self._walk(directory, recursive, follow=True)
        return []

    async def rewatch(self) -> int:
        """Walk every point again and add the watches that are missing (after a queue overflow lost the
        creation of directories); returns how many were added.  Logs what is left without a watch."""
        added = await self._walk_off_loop(self._rewatch)
        self.rewatched += len(added)
        return len(added)

    def _rewatch(self) -> list[Path]:
        added: list[Path] = []
        walked: set[Path] = set()
        self._unwatched.clear()
        self.degraded = False  # watches may have been freed since: try the limit again
        for directory, recursive in self._points:
            added += self._walk(directory, recursive, follow=True, recheck=True, walked=walked)
        if self._closed:
            return added
        for stale in [p for p in self._watches if p not in walked]:  # gone while its events were lost
            self._forget(stale)
        return added

    async def _walk_off_loop(self, walk: Callable[[], list[Path]]) -> list[Path]:
        before = self.unwatched
        try:
            added = await self._offload(walk)
        except Exception as err:  # a defect, or the offload thread gone at shutdown: rescans cover the rest
            log.error("inotify: a walk of the watched tree failed (%s); rescans find what it would have", err)
            return []
        assert isinstance(added, list)
        if self.unwatched > before:
            log.warning("inotify: %d directories under the watch points have no watch (%s); their changes are "
                        "seen at rescans only", self.unwatched,
                        "watch limit fs.inotify.max_user_watches reached" if self.degraded else "see above")
        return added

    # -- walks (on the offload thread) ----------------------------------------------------------

    def _walk(self, top: Path, recursive: bool, follow: bool = False, recheck: bool = False,
              walked: set[Path] | None = None) -> list[Path]:
        """Watch ``top`` (and every directory below it when ``recursive``); returns the directories that
        got a watch they did not have.  Without ``recheck`` a directory already watched ends the walk
        there (its subdirectories were watched with it); with it every directory is asked again
        (``inotify_add_watch`` returns the same watch for a directory already watched)."""
        added: list[Path] = []
        stack = [top]
        while stack and not self._closed:
            d = stack.pop()
            if walked is not None:
                walked.add(d)
            if not recheck and d in self._watches and self._recursive.get(d, False) >= recursive:
                continue
            if self._watch(d, recursive, follow and d == top):
                added.append(d)
            if not recursive:
                continue
            try:
                with os.scandir(d) as it:
                    stack += [Path(e.path) for e in it if e.is_dir(follow_symlinks=False)]
            except OSError as err:
                self._refuse(d, err)
        return added

    def _watch(self, d: Path, recursive: bool, follow: bool) -> bool:
        """Add (or confirm) the watch on ``d``; True when it had none in the table."""
        if self.degraded and d not in self._watches:
            self._unwatched.add(d)
            return False
        try:
            w = self._inotify.add_watch(d, MASK if follow else MASK | Mask.DONT_FOLLOW)
        except (OSError, ValueError) as err:  # ValueError: closed meanwhile
            if isinstance(err, OSError):
                self._refuse(d, err)
            return False
        old = self._wd_path.get(w.wd)
        if old is not None and old != d and self._watches.get(old) is w:
            self._forget(old, remove=False)  # the same directory, renamed while its watch lived
        if w.path != d:
            w.path = d  # events name the directory by its new path
        new = self._watches.get(d) is not w
        self._watches[d] = w
        self._wd_path[w.wd] = d
        self._recursive[d] = recursive or self._recursive.get(d, False)
        self._unwatched.discard(d)
        return new

    def _refuse(self, directory: Path, err: OSError) -> None:
        if err.errno in (errno.ENOENT, errno.ENOTDIR):
            return  # gone again
        self._unwatched.add(directory)
        if err.errno == errno.ENOSPC:
            if not self.degraded:
                log.error("inotify watch limit reached after %d directories (fs.inotify.max_user_watches): "
                          "directories past it are found by rescans only", len(self._watches))
            self.degraded = True
        elif directory not in self._refused:
            self._refused.add(directory)
            log.warning("%s: cannot watch: %s (its files are found by rescans)", directory, err.strerror or err)

    # -- table ----------------------------------------------------------------------------------

    def _forget(self, path: Path, remove: bool = True) -> None:
        """Drop ``path`` from the table (and its kernel watch with ``remove``)."""
        w = self._watches.pop(path, None)
        self._recursive.pop(path, None)
        self._refused.discard(path)
        if w is None:
            return
        if self._wd_path.get(w.wd) == path:
            del self._wd_path[w.wd]
        if remove:
            with contextlib.suppress(OSError, ValueError):  # already gone with its directory
                self._inotify.rm_watch(w)

    def _forget_tree(self, top: Path) -> None:
        """``top`` moved away: drop the watches on it and below it (its new name, if in the tree, is
        watched afresh)."""
        for p in [p for p in self._watches if p == top or top in p.parents]:
            self._forget(p)
        self._unwatched = {p for p in self._unwatched if p != top and top not in p.parents}

    # -- events (on the loop) ---------------------------------------------------------------------

    async def run(self, *until: asyncio.Event) -> None:
        """Deliver events until one of ``until`` is set."""
        stoppers = {asyncio.ensure_future(e.wait()) for e in until}
        try:
            while not any(e.is_set() for e in until):
                getter = asyncio.ensure_future(self._inotify.get())
                done, _ = await asyncio.wait({getter, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()
                    break
                await self.handle(getter.result())
        finally:
            for s in stoppers:
                s.cancel()

    async def handle(self, event: Event) -> None:
        """One inotify event: keep the table right and report what changed."""
        mask = event.mask
        if mask & Mask.Q_OVERFLOW:
            self.overflows += 1
            added = await self.rewatch()
            log.warning("inotify queue overflowed (events were lost): %d directories had no watch and have one "
                        "again, %d have none (watch limit or permissions: seen at rescans only); rescanning",
                        added, self.unwatched)
            self.on_overflow()
            return
        watch, path = event.watch, event.path
        if watch is None or path is None or self._watches.get(watch.path) is not watch:
            return  # a watch dropped already (its directory renamed or moved away): stale names
        if mask & Mask.IGNORED or mask & Mask.DELETE_SELF or mask & Mask.MOVE_SELF:
            if event.name is None:  # the directory itself went away
                self._forget(path, remove=bool(mask & Mask.MOVE_SELF))
            self.on_change(str(path))
            return
        parent = watch.path
        if mask & Mask.ISDIR and mask & Mask.MOVED_FROM:
            self._forget_tree(path)  # renamed: its new name (a MOVED_TO) is watched afresh
        elif mask & Mask.ISDIR and mask & _NEW_DIR and self._recursive.get(parent, False):
            await self._walk_off_loop(partial(self._walk, path, True, recheck=bool(mask & Mask.MOVED_TO)))
        self.on_change(str(path))
