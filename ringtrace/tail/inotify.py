"""File-system events from Linux inotify (asyncinotify): one watch per directory, faults kept per directory.

:class:`TreeWatcher` watches the app's watch points (``(directory, recursive)``): a recursive
point gets a watch on every directory below it, added as directories appear.  Why not one
recursive watch from a library: a directory the process may not read, a name that is not
UTF-8, or the inotify watch limit must cost that directory its events, not stop the watcher.

* a directory that cannot be watched (EACCES, vanished) is logged once and skipped; its files
  are still found by the app's rescans;
* the watch limit (ENOSPC, ``fs.inotify.max_user_watches``) is logged once: directories past it
  are covered by rescans only (``degraded``);
* symbolic links below a point are never followed; names are bytes underneath (paths are str
  with surrogate escapes, as ``os.fsdecode`` gives them);
* a kernel queue overflow calls ``on_overflow`` (the app rescans).

Runs in the app's event loop: ``set_points`` (may be called again when the points change) and
``run`` until one of its events is set.  ``on_change`` gets every path an event names.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from asyncinotify import Event, Inotify, Mask, Watch

log = logging.getLogger("ringtrace.tail")

MASK = (Mask.CREATE | Mask.MODIFY | Mask.CLOSE_WRITE | Mask.DELETE | Mask.MOVED_FROM | Mask.MOVED_TO
        | Mask.DELETE_SELF | Mask.MOVE_SELF | Mask.ONLYDIR)
_NEW_DIR = Mask.CREATE | Mask.MOVED_TO


class TreeWatcher:
    def __init__(self, on_change: Callable[[str], None], on_overflow: Callable[[], None]) -> None:
        self.on_change = on_change
        self.on_overflow = on_overflow
        self._inotify = Inotify()  # OSError when inotify is unavailable: the caller polls instead
        self._recursive: dict[Path, bool] = {}  # watched directory -> its subdirectories are watched too
        self._watches: dict[Path, Watch] = {}
        self._refused: set[Path] = set()
        self.degraded = False

    @property
    def watched(self) -> int:
        return len(self._watches)

    def close(self) -> None:
        self._inotify.close()

    def set_points(self, points: list[tuple[Path, bool]]) -> None:
        """Watch ``points`` (adding what is new; directories no longer wanted keep their watch until gone)."""
        for directory, recursive in points:
            self._add(directory.absolute(), recursive, follow=True)

    def _add(self, directory: Path, recursive: bool, follow: bool = False) -> None:
        if directory in self._watches and self._recursive.get(directory, False) >= recursive:
            return
        if self.degraded:
            return
        mask = MASK if follow else MASK | Mask.DONT_FOLLOW
        try:
            self._watches[directory] = self._inotify.add_watch(directory, mask)
        except OSError as err:
            self._refuse(directory, err)
            return
        self._recursive[directory] = recursive
        if recursive:
            try:
                children = [Path(e.path) for e in os.scandir(directory) if e.is_dir(follow_symlinks=False)]
            except OSError as err:
                self._refuse(directory, err)
                return
            for child in children:
                self._add(child, True)

    def _refuse(self, directory: Path, err: OSError) -> None:
        if err.errno == errno.ENOSPC:
            self.degraded = True
            log.error("inotify watch limit reached after %d directories (fs.inotify.max_user_watches): "
                      "directories past it are found by rescans only", len(self._watches))
        elif err.errno not in (errno.ENOENT, errno.ENOTDIR) and directory not in self._refused:
            self._refused.add(directory)
            log.warning("%s: cannot watch: %s (its files are found by rescans)", directory, err.strerror or err)

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
                self._handle(getter.result())
        finally:
            for s in stoppers:
                s.cancel()

    def _handle(self, event: Event) -> None:
        mask = event.mask
        if mask & Mask.Q_OVERFLOW:
            log.warning("inotify queue overflowed: rescanning")
            self.on_overflow()
            return
        path = event.path
        if path is None:
            return
        if mask & Mask.IGNORED or mask & Mask.DELETE_SELF or mask & Mask.MOVE_SELF:
            if event.name is None:  # the watched directory itself went away
                self._watches.pop(path, None)
                self._recursive.pop(path, None)
                self._refused.discard(path)
            self.on_change(str(path))
            return
        if mask & Mask.ISDIR and mask & _NEW_DIR:
            parent = event.watch.path if event.watch is not None else path.parent
            if self._recursive.get(parent, False):
                self._add(path, True)
        self.on_change(str(path))
