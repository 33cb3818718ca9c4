"""Which scope_stats file a host log belongs to.  Pure: paths in, decisions out (no disk access).

A log is a run of the folder it lies in: it is only ever paired with a file of that folder's tree,
never with a file of another run.  Rules, for each :class:`HostLog` (one per rank for an L3 log), in
order:

1. a scope_stats path the log says it wrote (``scope_stats: wrote N records ... to PATH``) that is one
   of the files;
2. the files in the log's directory tree (the log's folder and below), narrowed to the log's rank
   (and dispatch) when its lines name one: exactly one left is a match.  An untagged log over an L3
   tree of several ranks, or a rank with several dispatch files, is *ambiguous*;
3. no file in its tree: no match (``kind`` "outside"): the log is a run of its own (the caller
   reports it from the log alone and says why it was not paired).  There is no "the one file given
   beside it" guess: a log outside a file's run folder is another run's log.

Then, when the caller gives the files' metadata lines (``capacities``), a log whose capacities
contradict the file's is *another run* (``kind`` "other_run"), never paired: the ``Ring buffer
sizes:`` line's value for any ring and resource, or the deadlock report's size of the short resource
on its ring (``Heap ring R: ... size=``, ``Task ring R: ... active=A/S`` or a scope deadlock's task window,
``Pool used: A / S``; not the fanin spill pool, which scope_stats does not record), against
the metadata's ``*_max`` for that ring (a dep-pool report names no ring: a size no ring has).  (For one run
they are equal: the runtime writes the same capacities to both.)  A capacity of 0 (unknown) contradicts nothing.

A file takes at most one log: a rank-tagged log before an untagged one, then the first given.  What
is not matched is returned with the reason, never guessed.  Which files are host logs and where they
are looked for without ``--host-log`` is :mod:`.plan`'s decision (its docstring).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Literal

import msgspec

from ringtrace.model.records import RESOURCES, HostLog, Meta
from ringtrace.sources.paths import labels_for, run_root

__all__ = ["LogMatch", "MatchKind", "contradiction", "match_logs", "run_root"]

MatchKind = Literal["wrote", "tree", "rank", "outside", "ambiguous", "other_run", "taken"]
"""How a log was matched (``wrote``, ``tree``, ``rank``) or why not: ``outside`` (no file in its
directory tree), ``ambiguous`` (several, the lines do not say which), ``other_run`` (its capacities
contradict the file's metadata), ``taken`` (the file already has a log)."""


class LogMatch(msgspec.Struct, frozen=True):
    """``log`` belongs to ``file`` (None: unmatched); ``reason`` says why, or why not; ``kind`` is the
    rule (:data:`MatchKind`); ``candidate`` the file an ``other_run`` or ``taken`` log would have matched."""

    log: HostLog
    file: str | None
    reason: str
    kind: MatchKind = "tree"
    candidate: str | None = None


def _same(written: str, file: str) -> bool:
    w, f = PurePath(written), PurePath(file)
    if w == f:
        return True
    return not w.is_absolute() and len(w.parts) > 1 and f.parts[-len(w.parts):] == w.parts


def _candidate(log: HostLog, files: Sequence[str]) -> tuple[str | None, str, MatchKind]:
    for w in log.written:
        hit = [f for f in files if _same(w, f)]
        if len(hit) == 1:
            return hit[0], f"the log says it wrote {w}", "wrote"
    root = PurePath(log.path).parent
    tree = [f for f in files if PurePath(f).is_relative_to(root)]
    if not tree:
        return None, f"no scope_stats file in its directory tree ({root})", "outside"
    labels = {f: labels_for(PurePath(f)) for f in tree}
    if log.rank is not None:
        tree = [f for f in tree if labels[f].rank == str(log.rank)]
        if log.dispatch is not None:
            tree = [f for f in tree if labels[f].dispatch == str(log.dispatch)]
        if not tree:
            where = f"rank {log.rank}" + (f" d{log.dispatch}" if log.dispatch is not None else "")
            return None, f"its lines name {where}, which has no scope_stats file under {root}", "ambiguous"
        if len(tree) > 1:
            disp = ", ".join(f"d{labels[f].dispatch}" for f in tree)
            return (None, f"rank {log.rank} has {len(tree)} scope_stats files ({disp}) and the log does not say which",
                    "ambiguous")
        return tree[0], f"rank {log.rank} in its directory tree", "rank"
    if len(tree) == 1:
        return tree[0], "the scope_stats file in its directory tree", "tree"
    ranks = sorted({labels[f].rank for f in tree if labels[f].rank}, key=int)
    if len(ranks) > 1:
        return None, f"an L3 tree with ranks {', '.join(ranks)} and its lines do not say which rank", "ambiguous"
    return (None, f"{len(tree)} scope_stats files in its directory tree ({root}) and its lines do not say which",
            "ambiguous")


def contradiction(log: HostLog, meta: Meta) -> str | None:
    """What in ``log`` says it is another run than the file whose metadata line is ``meta``
    (``"says ring 1 heap size=8191, the file's metadata says 8192"``), or None.

    Compared, ring by ring: the ``Ring buffer sizes:`` line with the metadata's ``*_max``, and the
    deadlock report's size of the short resource on its ring.  A 0 on either side is unknown."""
    sizes = log.ring_sizes
    if sizes is not None:
        for res in RESOURCES:
            for ring, (s, m) in enumerate(zip(sizes.of(res), meta.maxes(res), strict=False)):
                if s > 0 and m > 0 and s != m:
                    return (f"says ring {ring} {res}={s} (its 'Ring buffer sizes' line), "
                            f"the file's metadata says {m}")
    d = log.deadlock
    if d is not None and d.kind == "dep_pool" and d.ring is None and d.pool_size:  # the report names no ring
        known = [m for m in meta.dep_pool_max if m > 0]
        if known and d.pool_size not in known:
            return (f"says a dep pool of {d.pool_size} entries, the file's metadata says "
                    f"{', '.join(str(m) for m in meta.dep_pool_max)} per ring")
        return None
    if d is None or d.ring is None:
        return None
    short = d.resource if d.kind != "fanin_pool" else None  # the spill pool's size is not in the metadata
    if short is None:
        return None
    said_size, caps = d.capacity, meta.maxes(short)
    have_size = caps[d.ring] if 0 <= d.ring < len(caps) else 0
    if said_size is not None and said_size > 0 and have_size > 0 and said_size != have_size:
        return f"says ring {d.ring} {short} size={said_size}, the file's metadata says {have_size}"
    return None


def match_logs(logs: Sequence[HostLog], files: Sequence[str],
               capacities: Mapping[str, Meta | None] | None = None) -> tuple[LogMatch, ...]:
    """Match every log to at most one of ``files`` (paths as the caller will report them, all
    absolute or all relative to the same directory as the logs' paths).  Same order as ``logs``.

    ``capacities``: a file's metadata line (None or absent: not known), to refuse a log whose
    capacities contradict it (see :func:`contradiction`)."""
    picks = [_candidate(log, files) for log in logs]
    refused: dict[int, str] = {}
    if capacities:
        for i, (file, _, _) in enumerate(picks):
            meta = capacities.get(file) if file is not None else None
            said = contradiction(logs[i], meta) if meta is not None else None
            if file is not None and said is not None:
                picks[i] = (None, f"{said}: another run; not paired", "other_run")
                refused[i] = file
    order = sorted(range(len(logs)), key=lambda i: (logs[i].rank is None, i))
    owner: dict[str, int] = {}
    out: list[LogMatch | None] = [None] * len(logs)
    for i in order:
        file, reason, kind = picks[i]
        if file is not None and file in owner:
            other = logs[owner[file]]
            out[i] = LogMatch(logs[i], None, f"{file} already has host log {other.path}"
                              + (f" (rank {other.rank})" if other.rank is not None else ""), "taken", file)
            continue
        if file is not None:
            owner[file] = i
        out[i] = LogMatch(logs[i], file, reason, kind, refused.get(i))
    return tuple(m for m in out if m is not None)
