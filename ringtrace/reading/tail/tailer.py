"""All followed files: discovery, change notifications, a fair reading order, idle timeouts, restart state.

:class:`Tailer` is synchronous and clock-free.  It decides *which* file to look at next; the
caller (the app's reader) does the looking, one :class:`~ringtrace.reading.tail.follower.Slice` at a time:

* :meth:`discover` (first scan and every rescan), :meth:`changed` (paths a watcher reported)
  and :meth:`poll_active` queue files that have something to read;
* :meth:`next_due` hands out the next file and :meth:`done` puts it back when it has more.
  Files reported by the watcher or being written (``urgent``) come first, round-robin, so a
  live run is never stuck behind a backlog; backlog files (found by a scan) are read one at a
  time to their end, so few runs are open at once;
* :meth:`vanished` and :meth:`fault` are how the caller reports a file it could not read: a
  fault stays with its file (logged once until the file reads again), the others carry on;
* :meth:`log_only_runs` (``--host-log-glob``): failed runs that left a host log and no scope_stats file.

**Idle is what the file did, not how long the agent slept.**  :meth:`tick` is the heartbeat (the app
ticks every 0.5 s); a gap between two ticks longer than :data:`PAUSE` is time the agent did not run
(SIGSTOP, a VM pause, a long throttle, a long blocking call) and is not counted towards any run's idle
timeout.  And before a run is finished by a timeout (``idle``, or ``complete`` after its ``settle``),
its file is looked at: one that holds bytes the run has not read (written while the agent slept, or
records beyond ``total`` still coming) is queued and read first.

A run is known by its content, not its path or mtime (``follower``'s
:class:`~ringtrace.reading.tail.follower.Inodes`, shared by every follower): a second root reaching the
same tree through a symbolic link, a hard link, or a directory renamed while ringtrace was down
(its saved entry is found by inode) is the same run, reported once.

Every call returns the sink events it caused, in order.  One caller at a time.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import stat
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from ringtrace.analysis.advise import advise
from ringtrace.config import Thresholds
from ringtrace.gather.pairing import match_logs
from ringtrace.hostlog.read import read_log
from ringtrace.model.records import WANT_ALL, FinishReason, HostLog, SinkEvent, Wants, utf8
from ringtrace.reading.tail import state as state_mod
from ringtrace.reading.tail.discover import Root, walk_errors
from ringtrace.reading.tail.follower import SETTLE, Finished, Follower, Inodes
from ringtrace.sources.paths import source_labels
from ringtrace.stages.run import log_only_run

log = logging.getLogger("ringtrace.reading.tail")

PAUSE = 2.0
"""Seconds between two ticks beyond which the agent is taken not to have run meanwhile (the app ticks
every 0.5 s): that time is not counted towards idle timeouts."""
GONE_KEPT = 10_000
"""Generations remembered for deleted paths (a path that comes back continues its numbering), and
identities of finished runs whose path went away (a renamed directory is the same run)."""

URGENT, BACKLOG = "urgent", "backlog"

Ident = tuple[int, int, int, int]
"""A file's identity and version: device, inode, size, mtime (ns)."""


class Tailer:
    """Every followed file of one watch process, and the order they are read in.

    Who calls, on which thread: the app's reader task is the one caller, one call at a time.  What
    touches files or directories runs on the app's reader thread (``discover``, ``changed``,
    ``watch_points``, ``tick``, ``finish_all``, ``vanished``, ``log_only_runs``, and the followers'
    ``look``/``take``, which may read host logs through ``find_log``); the bookkeeping calls that do no
    I/O (``next_due``, ``done``, ``fault``, ``poll_active``) run on the event loop between them, never at
    the same time as a reader-thread call.  The app's state saver calls :meth:`snapshot` on the reader
    thread too (it iterates copies).  Time comes in as arguments: ``now`` is monotonic seconds.

    Owns: the followers (keyed by path; a file renamed, or its directory, is followed at its new path
    by its file identity), the queues, the host logs decided (``--host-log-glob``) and the candidates
    waiting for their idle timeout, and the saved state not yet matched.
    """

    def __init__(self, roots: Iterable[str], thresholds: Thresholds, idle_timeout: float,
                 saved: state_mod.State | None = None, wants: Wants = WANT_ALL,
                 find_log: Callable[[Path], HostLog | None] | None = None, log_name: str = "",
                 settle: float = SETTLE, pause: float = PAUSE) -> None:
        self.roots = [Root(r) for r in roots]
        self.thresholds = thresholds
        self.idle_timeout = idle_timeout
        self.wants = wants
        self.find_log = find_log
        self.followers: dict[Path, Follower] = {}
        self.inodes = Inodes()  # every follower's view of files by (device, inode): run identity across paths
        self.settle = settle  # seconds a run with every promised record waits for more (0: finish at once)
        self.pause = pause  # a longer gap between two ticks is time the agent did not run
        self._last_tick: float | None = None
        self.slept = 0.0  # seconds the agent was found not to have run (gaps between ticks), in all
        self._saved = dict(saved.files) if saved is not None else {}
        self._gone: OrderedDict[Path, int] = OrderedDict()
        self.missing_roots: set[str] = set()
        self._queues: dict[str, deque[Follower]] = {URGENT: deque(), BACKLOG: deque()}
        self._queued: dict[Path, str] = {}
        self._faulted: dict[Path, str] = {}  # path -> the fault last logged for it
        self.faults = 0  # faults seen (each file's first of a kind is logged)
        self._onerror = walk_errors(log)
        self.log_name = log_name  # --host-log-glob without a directory part: logs of runs without records
        self._logs: dict[Path, tuple[Ident, tuple[str, ...]]] = {}  # decided logs: version, keys of their runs
        self._logs_saved = dict(saved.host_logs) if saved is not None else {}
        self._log_seen: dict[Path, tuple[Ident, float]] = {}  # undecided logs: version, monotonic time first seen
        self._log_faults: set[Path] = set()

    @property
    def watched(self) -> int:
        return len(self.followers)

    def watch_points(self) -> list[tuple[Path, bool]]:
        """Directories a file-system watcher should watch now: (directory, recursive)."""
        points = {w for r in self.roots if (w := r.watch_dir) is not None}
        return sorted(points)

    # -- followers ----------------------------------------------------------------------------

    def _follower(self, path: Path) -> Follower:
        f = self.followers.get(path)
        if f is None:
            f = Follower(path, source_labels(path), self.thresholds, self._gone.pop(path, 0), self.wants,
                         self.find_log, self.inodes, self.settle)
            log.info("following %s", path)
            saved = self._saved.pop(str(path), None)
            if saved is not None:
                f.generation = max(f.generation, saved.generation)
                if not saved.finished and saved.key:  # it was reading a finished run again: the run's keys
                    f.resumes = Finished(saved.dev, saved.ino, 0, 0, "", str(path), max(0, saved.generation - 1),
                                         (saved.key, saved.content_key))
                if saved.finished:
                    fin = _finished(str(path), saved)
                    f.ident = (fin.dev, fin.ino)
                    f.finished, f.finished_reason = fin, "complete"
                    self.inodes.remember(fin)
            self.followers[path] = f
        return f

    def _drop(self, f: Follower) -> None:
        """Forget a follower whose file is gone (its generation is remembered for a comeback)."""
        if self.followers.get(f.path) is f:
            del self.followers[f.path]
            self._gone[f.path] = f.generation
            while len(self._gone) > GONE_KEPT:
                self._gone.popitem(last=False)
        self.inodes.forget(f)
        self._queued.pop(f.path, None)
        self._faulted.pop(f.path, None)

    def _queue(self, f: Follower, which: str) -> None:
        now_in = self._queued.get(f.path)
        if now_in == which or (now_in == URGENT and which == BACKLOG):
            return
        self._queued[f.path] = which
        self._queues[which].append(f)

    def next_due(self) -> tuple[Follower, bool] | None:
        """The next file to look at and whether it is urgent, or None when nothing is due."""
        for which in (URGENT, BACKLOG):
            q = self._queues[which]
            while q:
                f = q.popleft()
                if self._queued.get(f.path) == which and self.followers.get(f.path) is f:
                    del self._queued[f.path]
                    return f, which == URGENT
        return None

    def done(self, f: Follower, more: bool, urgent: bool) -> None:
        """``f`` was looked at; ``more`` when bytes remain.  Urgent files go round-robin, a backlog
        file is continued first."""
        self._faulted.pop(f.path, None)
        if not more or self.followers.get(f.path) is not f or f.path in self._queued:
            return
        self._queued[f.path] = URGENT if urgent else BACKLOG
        if urgent:
            self._queues[URGENT].append(f)
        else:
            self._queues[BACKLOG].appendleft(f)

    def vanished(self, f: Follower) -> list[SinkEvent]:
        """The file could not be found: its run ends as ``deleted`` and the follower is dropped."""
        out = f.finish("deleted", 0)
        self._drop(f)
        return out

    def fault(self, f: Follower, err: BaseException) -> None:
        """A file could not be read (permissions, EIO, not a regular file...): logged once per kind,
        looked at again at the next rescan or change.  Its run stays open (idle timeout applies)."""
        self.faults += 1
        text = f"{type(err).__name__}: {err}"
        if self._faulted.get(f.path) != text:
            self._faulted[f.path] = text
            log.error("%s: cannot read: %s (looking again at the next change or rescan)", f.path, err)

    # -- what to look at ------------------------------------------------------------------------

    def discover(self, now: float, wall: float) -> list[SinkEvent]:
        """Find files that appeared without an event and stat every known one (finished ones too: a
        rewrite whose events were lost starts a new run); what has something to read is queued."""
        out: list[SinkEvent] = []
        logs: list[Path] = []
        for root in self.roots:
            if not root.exists:
                if root.text not in self.missing_roots:
                    self.missing_roots.add(root.text)
                    log.warning("%s: does not exist (yet); looking again at every rescan", root.text)
                continue
            self.missing_roots.discard(root.text)
            files, more = root.scan_also(self._onerror, also=self._is_log if self.log_name else None)
            logs += more
            moved = _Moves(self)
            for path in files:
                if path not in self.followers and not moved.adopt(path):
                    self._follower(path)
        for f in list(self.followers.values()):
            try:
                st = os.stat(f.path)
            except FileNotFoundError:
                out += self.vanished(f)
                continue
            except OSError as err:
                self.fault(f, err)
                continue
            if not stat.S_ISREG(st.st_mode):
                if f.active:
                    out += f.finish("rewritten", 0)
                self.fault(f, OSError(f"{f.path}: not a regular file"))
            elif f.pending(st):
                self._queue(f, BACKLOG)
        for gone in [p for p in self._saved if not os.path.lexists(p)]:  # saved files deleted (or moved) meanwhile
            saved = self._saved.pop(gone)
            if saved.finished:
                self.inodes.remember(_finished(gone, saved))  # a directory renamed while down: found by inode
        self.inodes.trim(len(self.followers) + GONE_KEPT)
        return out + self.log_only_runs(now, logs=logs)

    def _is_log(self, path: Path) -> bool:
        return fnmatch.fnmatchcase(path.name, self.log_name)

    def log_only_runs(self, now: float, final: bool = False, logs: list[Path] | None = None) -> list[SinkEvent]:
        """Runs known from their host log alone: a log under a root whose name matches ``log_name``,
        with no followed file in its directory tree claiming it (the rules of ``summary --host-log``),
        that reports a failure.  Decided once per version of the log (device, inode, size, mtime), when
        ``idle_timeout`` seconds of the monotonic clock (``now``) have passed since this call first saw
        that version: the log's mtime is never compared with a clock, so a log dated in the future
        (clock skew) is decided as fast as any other.  With ``final``, at once (``--once``); a restart
        remembers the decision.  ``logs``: the candidates :meth:`discover`'s walk found (else the roots
        are searched for them)."""
        if not self.log_name:
            return []
        if logs is None:
            logs = [p for root in self.roots if root.exists
                    for p in root.scan_also(self._onerror, also=self._is_log)[1]]
        out: list[SinkEvent] = []
        for path in logs:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # a FIFO named like a log would block the reader
            seen = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if path in self._logs and self._logs[path][0] == seen:
                continue
            saved = self._logs_saved.pop(str(path), None)
            if saved is not None and (saved.dev, saved.ino, saved.size, saved.mtime_ns) == seen:
                self._logs[path] = (seen, ())
                continue
            first = self._log_seen.get(path)
            if first is None or first[0] != seen:  # new, or changed since the last look: the wait starts now
                first = self._log_seen[path] = (seen, now)
            if final or now - first[1] >= self.idle_timeout:
                del self._log_seen[path]
                out += self._decide(path, seen)
        for table in (self._logs, self._log_seen):
            for gone in [p for p in table if not os.path.lexists(p)]:
                del table[gone]
        return out

    def _decide(self, path: Path, seen: Ident) -> list[SinkEvent]:
        try:
            parts = read_log(path)  # whole, or its edges past the cap (logged)
        except OSError as err:
            if path not in self._log_faults:
                self._log_faults.add(path)
                log.warning("%s: cannot read host log: %s", utf8(str(path)), err)
            return []
        self._log_faults.discard(path)
        tree = [str(p) for p in self.followers if p.is_relative_to(path.parent)]
        logs = [msgspec.structs.replace(part, path=str(path)) for part in parts]
        if tree and any(m.file is not None for m in match_logs(logs, tree)):
            self._logs[path] = (seen, ())  # the log of a followed run: read at that run's finish
            return []
        out: list[SinkEvent] = []
        keys: list[str] = []
        base = "hostlog:{}:{}:{}:{}:{}".format(path, *seen)
        for part in logs:
            if part.failed:
                keys.append(base + (f":rank{part.rank}" if part.rank is not None else ""))
                out += log_only_run(msgspec.structs.replace(part, path=utf8(str(path))), self.thresholds, keys[-1],
                                    advise)
                log.info("%s: a failed run without a scope_stats file", utf8(str(path)))
        self._logs[path] = (seen, tuple(keys))
        return out

    def poll_active(self) -> None:
        """Polling mode: queue every file being written whose stat says a look would do something (the
        polling watcher compares mtimes in whole seconds, so writes within a second of the last change
        send no event).  A file with nothing new is not queued, so :meth:`tick` can finish it.  Runs on
        the app's reader thread (a stat per active file)."""
        for f in list(self.followers.values()):
            if not f.active:
                continue
            try:
                st = os.stat(f.path)
            except OSError:
                self._queue(f, URGENT)  # gone: the look says so
                continue
            if f.pending(st):
                self._queue(f, URGENT)

    def changed(self, paths: Iterable[str]) -> None:
        """A watcher saw ``paths`` change (created, written, deleted, moved in): queue them first.

        A new directory is walked (files created before its watch existed send no event) and its
        files are queued, followed ones too.  A new path whose file is a followed file that is gone
        from its old path (same device and inode, not shorter than what was read) is that file,
        moved: its follower goes on at the new path, mid-run, without reading it again.  Runs on the
        app's reader thread (lstat, directory walks)."""
        moved = _Moves(self)
        for text in sorted(set(paths)):
            path = Path(text).absolute()
            f = self.followers.get(path)
            if f is None:
                try:
                    mode = os.lstat(path).st_mode  # a symbolic link is never followed
                except OSError:
                    continue  # gone again, or not ours to read
                if stat.S_ISDIR(mode):
                    # A new directory: files created in it before the watcher saw it send no event.
                    for found in Root(str(path)).scan(self._onerror, self._matches):
                        g = self.followers.get(found) or moved.adopt(found) or self._follower(found)
                        self._queue(g, URGENT)
                    continue
                if not stat.S_ISREG(mode) or not self._matches(path):
                    continue
                f = moved.adopt(path) or self._follower(path)
            self._queue(f, URGENT)

    def _rekey(self, f: Follower, path: Path) -> None:
        """``f``'s file is now at ``path`` (a rename of it or of a directory above it).  The run being
        read keeps the path and labels it started with (the sinks know it by them); the next run of
        the file is named after the new path."""
        old = f.path
        del self.followers[old]
        queued, fault = self._queued.pop(old, None), self._faulted.pop(old, None)
        f.path, f.labels = path, source_labels(path)
        self.followers[path] = f
        if queued is not None:
            self._queued[path] = queued
        if fault is not None:
            self._faulted[path] = fault
        log.info("%s: moved to %s; following it there", old, path)

    def _matches(self, path: Path) -> bool:
        return any(r.matches(path) for r in self.roots)

    def tick(self, now: float) -> list[SinkEvent]:
        """Finish runs that hold every promised record and were quiet for ``settle`` seconds
        (``complete``), and runs that have not changed for ``idle_timeout`` seconds (``idle``) of the time
        the agent ran; a run whose file holds bytes it has not read is queued instead (see the module
        docstring).  Runs on the app's reader thread (a stat per run about to time out)."""
        if self._last_tick is not None and now - self._last_tick > self.pause:
            self._slept_for(now - self._last_tick)
        self._last_tick = now
        out: list[SinkEvent] = []
        for f in list(self.followers.values()):
            if not f.active or f.path in self._queued:
                continue
            settled = f.settled(now)
            if not settled and f.idle_for(now) < self.idle_timeout:
                continue
            if self._unread(f):
                self._queue(f, URGENT)  # read what is there before any verdict by time
                continue
            out += f.finish("complete" if settled else "idle")
        return out

    def _slept_for(self, gap: float) -> None:
        """The agent did not run for ``gap`` seconds: that time does not count towards any run's idleness."""
        self.slept += gap
        log.log(logging.INFO if gap >= 10 * self.pause else logging.DEBUG,
                "no tick for %.1fs (the agent was stopped, paused, throttled or busy): not counted as idle time", gap)
        for f in self.followers.values():
            if f.active:
                f.last_change += gap
        for path, (seen, first) in list(self._log_seen.items()):
            self._log_seen[path] = (seen, first + gap)

    def _unread(self, f: Follower) -> bool:
        """``f``'s file has bytes its run has not read, or is another file (or gone: the look says so).
        A file that faulted keeps its timeout (it may stay unreadable)."""
        if f.path in self._faulted:
            return False
        try:
            st = os.stat(f.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and f.pending(st)

    def finish_all(self, reason: FinishReason) -> list[SinkEvent]:
        """End every active run (``eof`` for --once, ``shutdown`` on a signal)."""
        out: list[SinkEvent] = []
        for f in self.followers.values():
            out += f.finish(reason)
        return out

    def snapshot(self, undelivered: frozenset[tuple[str, int]] = frozenset()) -> state_mod.State:
        """What to save for a restart: the files that exist now (saved entries not yet seen are kept).

        A run whose ``RunFinished`` is still in ``undelivered`` (path, generation; a log-only run:
        key, 0) is saved as not finished: a restart reads it again rather than lose it (also under a
        path that took that run's identity: a renamed directory, a second root).
        """
        files: dict[str, state_mod.FileState] = {}
        # the app's saver calls this on the reader thread while the loop may add followers: iterate a copy
        for path, f in list(self.followers.items()):
            fin = f.finished
            if f.ident is None:
                continue
            if f.run is None and fin is not None and fin.run not in undelivered:
                files[str(path)] = state_mod.FileState(fin.dev, fin.ino, fin.size, fin.mtime_ns, f.generation, True,
                                                       fin.digest, *fin.keys)
            else:
                again = f.continues if f.run is not None else None
                files[str(path)] = state_mod.FileState(f.ident[0], f.ident[1], f.offset, f.read_mtime, f.generation,
                                                       False, "", *(again.keys if again is not None else ("", "")))
        logs = {str(path): state_mod.FileState(*seen, 0, True) for path, (seen, keys) in list(self._logs.items())
                if not any((k, 0) in undelivered for k in keys)}
        return state_mod.State(files={**self._saved, **files}, host_logs={**self._logs_saved, **logs})


class _Moves:
    """Finds, for a path that is new to a :class:`Tailer`, the follower whose file moved there.  The
    index of followers by file identity is built on first use, once per call of ``changed``/``discover``."""

    def __init__(self, tailer: Tailer) -> None:
        self.tailer = tailer
        self._by_ident: dict[tuple[int, int], Follower] | None = None

    def adopt(self, path: Path) -> Follower | None:
        """The follower now at ``path`` when ``path``'s file is a followed file moved there, else None."""
        if self._by_ident is None:
            self._by_ident = {f.ident: f for f in self.tailer.followers.values() if f.ident is not None}
        if not self._by_ident:
            return None
        try:
            st = os.lstat(path)
        except OSError:
            return None
        f = self._by_ident.get((st.st_dev, st.st_ino))
        if f is None or f.path == path or st.st_size < f.offset or os.path.lexists(f.path):
            return None  # another file (a hard link, or an inode number used again), or nothing moved
        self.tailer._rekey(f, path)
        return f


def _finished(path: str, saved: state_mod.FileState) -> Finished:
    return Finished(saved.dev, saved.ino, saved.size, saved.mtime_ns, saved.digest, path, max(-1, saved.generation - 1),
                    (saved.key, saved.content_key))
