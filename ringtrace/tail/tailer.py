"""All followed files: discovery, change notifications, idle timeouts, restart state.

:class:`Tailer` is synchronous and clock-free: the app calls :meth:`changed` with the paths a
watcher reported, :meth:`tick` periodically, :meth:`rescan` as a safety net for lost events,
each with the current monotonic ``now`` and wall-clock ``wall``; every call returns the sink
events it caused, in order.  One caller at a time (the app's reader thread).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from ringtrace.diagnose import Thresholds
from ringtrace.layout import source_labels
from ringtrace.records import FinishReason, SinkEvent
from ringtrace.tail import state as state_mod
from ringtrace.tail.discover import Root
from ringtrace.tail.follower import Follower

log = logging.getLogger("ringtrace.tail")


class Tailer:
    def __init__(self, roots: Iterable[str], thresholds: Thresholds, idle_timeout: float,
                 saved: state_mod.State | None = None) -> None:
        self.roots = [Root(r) for r in roots]
        self.thresholds = thresholds
        self.idle_timeout = idle_timeout
        self.followers: dict[Path, Follower] = {}
        self._saved = saved.files if saved is not None else {}
        self.missing_roots: set[str] = set()

    @property
    def watched(self) -> int:
        return len(self.followers)

    def watch_points(self) -> list[tuple[Path, bool]]:
        """Directories a file-system watcher should watch now: (directory, recursive)."""
        points = {w for r in self.roots if (w := r.watch_dir) is not None}
        return sorted(points)

    def _follower(self, path: Path) -> Follower:
        f = self.followers.get(path)
        if f is None:
            f = Follower(path, source_labels(path), self.thresholds)
            log.info("following %s", path)
            saved = self._saved.pop(str(path), None)
            if saved is not None:
                f.generation = saved.generation
                if saved.finished:
                    f.ident = (saved.dev, saved.ino)
                    f.finished_size, f.finished_mtime = saved.size, saved.mtime_ns
                    f.finished_reason = "complete"
            self.followers[path] = f
        return f

    def rescan(self, now: float, wall: float) -> list[SinkEvent]:
        """Find files that appeared without an event; look at every known file (finished ones too:
        a rewrite whose events were lost or coalesced starts a new run here)."""
        out: list[SinkEvent] = []
        for root in self.roots:
            if not root.exists:
                if root.text not in self.missing_roots:
                    self.missing_roots.add(root.text)
                    log.warning("%s: does not exist (yet); looking again at every rescan", root.text)
                continue
            self.missing_roots.discard(root.text)
            for path in root.scan():
                path = path.absolute()
                if path not in self.followers:
                    out += self._follower(path).poll(now, wall)
        for f in list(self.followers.values()):
            out += f.poll(now, wall)
        return out

    def poll_active(self, now: float, wall: float) -> list[SinkEvent]:
        """Polling mode: look at every file being written.  The polling watcher compares mtimes in
        whole seconds, so writes within a second of the last change send no event."""
        out: list[SinkEvent] = []
        for f in list(self.followers.values()):
            if f.active:
                out += f.poll(now, wall)
        return out

    def changed(self, paths: Iterable[str], now: float, wall: float) -> list[SinkEvent]:
        """A watcher saw ``paths`` change (created, written, deleted)."""
        out: list[SinkEvent] = []
        for text in sorted(set(paths)):
            path = Path(text).absolute()
            f = self.followers.get(path)
            if f is None:
                if path.is_dir():
                    # A new directory: files created in it before the watcher saw it send no event.
                    out += self._new_files(path, now, wall)
                    continue
                if not path.is_file() or not any(r.matches(path) for r in self.roots):
                    continue
                f = self._follower(path)
            out += f.poll(now, wall)
        return out

    def _new_files(self, directory: Path, now: float, wall: float) -> list[SinkEvent]:
        out: list[SinkEvent] = []
        for dirpath, _dirs, names in os.walk(directory):
            for name in names:
                path = Path(dirpath, name)
                if path not in self.followers and any(r.matches(path) for r in self.roots):
                    out += self._follower(path).poll(now, wall)
        return out

    def tick(self, now: float) -> list[SinkEvent]:
        """Finish runs that have not changed for ``idle_timeout`` seconds."""
        out: list[SinkEvent] = []
        for f in self.followers.values():
            if f.active and f.idle_for(now) >= self.idle_timeout:
                out += f.finish("idle")
        return out

    def finish_all(self, reason: FinishReason) -> list[SinkEvent]:
        """End every active run (``eof`` for --once, ``shutdown`` on a signal)."""
        out: list[SinkEvent] = []
        for f in self.followers.values():
            out += f.finish(reason)
        return out

    def snapshot(self) -> state_mod.State:
        """What to save for a restart."""
        files: dict[str, state_mod.FileState] = {}
        for path, f in self.followers.items():
            if f.ident is None:
                continue
            finished = not f.active and f.finished_reason not in (None, "shutdown", "deleted")
            files[str(path)] = state_mod.FileState(f.ident[0], f.ident[1], f.finished_size if finished else f.offset,
                                                   f.finished_mtime, f.generation, finished)
        return state_mod.State(files={**self._saved, **files})
