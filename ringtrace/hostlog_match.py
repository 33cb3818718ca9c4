"""Which scope_stats file a host log belongs to.  Pure: paths in, decisions out (no disk access).

Rules, for each :class:`HostLog` (one per rank for an L3 log), in order:

1. a scope_stats path the log says it wrote (``scope_stats: wrote N records ... to PATH``) that is one
   of the files;
2. the files in the log's directory tree (the log's folder and below), narrowed to the log's rank
   (and dispatch) when its lines name one: exactly one left is a match.  An untagged log over an L3
   tree of several ranks, or a rank with several dispatch files, is *ambiguous*;
3. no file in its tree, and the whole input is one file and one log: the file given beside it.

A file takes at most one log: a rank-tagged log before an untagged one, then the first given.  What
is not matched is returned with the reason, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath

import msgspec

from ringtrace.layout import DIR_NAME, labels_for
from ringtrace.records import HostLog


class LogMatch(msgspec.Struct, frozen=True):
    """``log`` belongs to ``file`` (None: unmatched); ``reason`` says why, or why not."""

    log: HostLog
    file: str | None
    reason: str


def _same(written: str, file: str) -> bool:
    w, f = PurePath(written), PurePath(file)
    if w == f:
        return True
    return not w.is_absolute() and len(w.parts) > 1 and f.parts[-len(w.parts):] == w.parts


def _candidate(log: HostLog, files: Sequence[str], n_logs: int) -> tuple[str | None, str]:
    for w in log.written:
        hit = [f for f in files if _same(w, f)]
        if len(hit) == 1:
            return hit[0], f"the log says it wrote {w}"
    root = PurePath(log.path).parent
    tree = [f for f in files if PurePath(f).is_relative_to(root)]
    if not tree:
        if len(files) == 1 and n_logs == 1:
            return files[0], "the one scope_stats file given beside it"
        return None, f"no scope_stats file in its directory tree ({root})"
    labels = {f: labels_for(PurePath(f)) for f in tree}
    if log.rank is not None:
        tree = [f for f in tree if labels[f].rank == str(log.rank)]
        if log.dispatch is not None:
            tree = [f for f in tree if labels[f].dispatch == str(log.dispatch)]
        if not tree:
            where = f"rank {log.rank}" + (f" d{log.dispatch}" if log.dispatch is not None else "")
            return None, f"its lines name {where}, which has no scope_stats file under {root}"
        if len(tree) > 1:
            disp = ", ".join(f"d{labels[f].dispatch}" for f in tree)
            return None, f"rank {log.rank} has {len(tree)} scope_stats files ({disp}) and the log does not say which"
        return tree[0], f"rank {log.rank} in its directory tree"
    if len(tree) == 1:
        return tree[0], "the scope_stats file in its directory tree"
    ranks = sorted({labels[f].rank for f in tree if labels[f].rank}, key=int)
    if len(ranks) > 1:
        return None, f"an L3 tree with ranks {', '.join(ranks)} and its lines do not say which rank"
    return None, f"{len(tree)} scope_stats files in its directory tree ({root}) and its lines do not say which"


def match_logs(logs: Sequence[HostLog], files: Sequence[str]) -> tuple[LogMatch, ...]:
    """Match every log to at most one of ``files`` (paths as the caller will report them, all
    absolute or all relative to the same directory as the logs' paths).  Same order as ``logs``."""
    n_logs = len({log.path for log in logs})
    picks = [_candidate(log, files, n_logs) for log in logs]
    order = sorted(range(len(logs)), key=lambda i: (logs[i].rank is None, i))
    owner: dict[str, int] = {}
    out: list[LogMatch | None] = [None] * len(logs)
    for i in order:
        file, reason = picks[i]
        if file is not None and file in owner:
            other = logs[owner[file]]
            out[i] = LogMatch(logs[i], None, f"{file} already has host log {other.path}"
                              + (f" (rank {other.rank})" if other.rank is not None else ""))
            continue
        if file is not None:
            owner[file] = i
        out[i] = LogMatch(logs[i], file, reason)
    return tuple(m for m in out if m is not None)


def run_root(file: PurePath) -> PurePath:
    """The run directory a scope_stats file belongs to, where its host log sits: ``<work_dir>`` of
    ``<work_dir>/dfx_outputs/scope_stats/x.jsonl``, ``<out_dir>`` of ``<out_dir>/dfx_outputs/rank<N>/d<K>/...``,
    ``outputs/<case>_<ts>`` of a scene test.  (For ``watch --host-log-glob``: patterns are relative to it.)"""
    parts = list(file.parent.parts)
    if parts and parts[-1] == DIR_NAME:
        parts.pop()
    if labels_for(file).rank:  # rank<N>/d<K>
        del parts[-2:]
    if parts and parts[-1] == "dfx_outputs":
        parts.pop()
    return PurePath(*parts) if parts else PurePath(".")
