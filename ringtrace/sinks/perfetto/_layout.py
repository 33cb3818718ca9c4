"""What the two Perfetto writers share: the per-run and per-ring state, rank order and pids, the
process labels and description, the time axis (the layout is described in :mod:`ringtrace.sinks.perfetto`)."""

from __future__ import annotations

import re

from ringtrace.model.records import Meta, OpenScope, PairEvent, Record, RunFinished, Scope, Source, Verdict
from ringtrace.model.runtime import TABLE

TIME_AXIS = ("time axis: 1 ns = 1 boundary record; timestamps are line numbers in the scope_stats file "
             "(records carry no timestamps)")
JSON_TIME_AXIS = TIME_AXIS.replace("1 ns", "1 us")


class RingState:
    """One ring of one source: its packet sequence, tracks and interned site names."""

    __slots__ = ("caps", "extra", "full", "names", "pct_extra", "present", "ring", "seq", "seq_len", "uuid")

    def __init__(self, ring: int, seq: bytes, uuid: int, present: tuple[int, ...]) -> None:
        self.ring = ring
        self.seq = seq  # the encoded trusted_packet_sequence_id field
        self.seq_len = len(seq)
        self.uuid = uuid
        self.present = present  # the resources (indices in TABLE) its records carry: a v4 file has no dep pool
        self.full = len(present) == len(TABLE)  # every one of them
        self.names: dict[str, bytes] = {}  # site -> encoded name_iid field
        self.extra = b""  # encoded extra_counter_track_uuids of the ring's resources (no tensormap)
        self.caps: tuple[int, ...] = ()  # the present resources' capacities when all are known: use-% counters
        self.pct_extra = b""  # encoded extra_counter_track_uuids of the use-% counters


class RunState:
    """One source's state while it is written: O(rings), plus the pairer's open scopes (its latest summary)."""

    def __init__(self, source: Source, meta: Meta | None, uuid: int, tm_uuid: int) -> None:
        self.source = source
        self.meta = meta
        self.uuid = uuid
        self.tm_uuid = tm_uuid
        self.rings: dict[int, RingState] = {}
        self.open: tuple[OpenScope, ...] = ()  # the pairer's open scopes after the latest progress
        self.last_line = 0
        self.labels: list[str] = []
        self.description = ""

    def finish(self, fin: RunFinished | None, axis: str = "1 ns") -> tuple[tuple[OpenScope, ...], bool, int]:
        """The run ended (``fin``) or its trace closes first (None): takes the final metadata, labels and
        description; returns what a writer ends at the final tick: the pairer's open scopes (innermost
        last), whether the run wedged in them (else they are ``open_at_close``), and that tick."""
        if fin is not None and fin.summary.meta is not None:
            self.meta = fin.summary.meta
        self.labels, self.description = run_status(self.source, self.meta, fin, axis)
        opened = fin.summary.open if fin is not None else self.open
        return opened, fin is not None and bool(fin.summary.wedged), self.last_line + 1


def present(rec: Record) -> tuple[int, ...]:
    """The resources (indices in TABLE) a ring's first record carries (a resource newer than its file: None)."""
    return tuple(i for i, r in enumerate(TABLE) if getattr(rec, r.end_field) is not None)


def event_line(ev: PairEvent) -> int:
    """The line of the record that caused ``ev``."""
    return ev.end_line if isinstance(ev, Scope) else ev.line


def _number(label: str) -> int:
    """A rank or dispatch label as a number (-1 when it is not one: ASCII digits only)."""
    return int(label) if label.isascii() and label.isdigit() else -1


def sort_key(source: Source) -> tuple[str, int, int, str, int]:
    """Rank order: run, rank, dispatch (numbers), then path and generation."""
    lab = source.labels
    return (lab.run, _number(lab.rank), _number(lab.dispatch), source.path, source.generation)


PID_MAX = (1 << 31) - 1
"""Perfetto's pids are int32."""


def rank_pid(rank: str) -> int:
    """The pid of a source in a trace of its own: rank + 1 (rank order) while that fits an int32;
    a larger rank is mapped deterministically into 1..PID_MAX; 1 without a numeric rank."""
    n = _number(rank)
    if n < 0:
        return 1
    return n + 1 if n < PID_MAX else 1 + n % PID_MAX


_STAMP = re.compile(r"_\d{8}_\d{6}$")


def process_name(source: Source) -> str:
    """What tells the processes apart first: ``rank2/d1 decode_layer`` (the run name less its timestamp)
    for an L3 rank; the run name for a single-chip run; the path where the layout names nothing."""
    lab = source.labels
    tail = "/".join(p for p in (f"rank{lab.rank}" if lab.rank else "", f"d{lab.dispatch}" if lab.dispatch else "")
                    if p)
    name = f"{tail} {_STAMP.sub('', lab.run)}".strip() if tail else (lab.run or source.path)
    return name + (f" (generation {source.generation})" if source.generation else "")


def run_status(source: Source, meta: Meta | None, fin: RunFinished | None,
               axis: str = "1 ns") -> tuple[list[str], str]:
    """Process labels (alarms first: wedge, fatal, dropped, incomplete) and description."""
    labels: list[str] = []
    text = [f"scope_stats of {source.display_path}", TIME_AXIS.replace("1 ns", axis)]
    if fin is not None:  # the run's one verdict first (never decided here)
        v = fin.verdict
        labels.append(verdict_title(v))
        text.append(f"verdict {v.kind} ({v.severity}): {v.text}")
    if meta is not None:
        if meta.fatal:
            labels.append("FATAL")
        if meta.dropped:
            labels.append(f"DROPPED {meta.dropped} records")
        text.append(f"version {meta.version}, fatal {str(meta.fatal).lower()}, dropped {meta.dropped}, "
                    f"total {meta.total}")
    if fin is None:
        labels.append("UNFINISHED (trace closed before the run ended)")
    else:
        s = fin.summary
        if not s.complete:
            total = "?" if meta is None or meta.total is None else str(meta.total - meta.dropped)
            labels.append(f"INCOMPLETE {s.records} of {total} records")
        text.append(f"records {s.records}, complete {str(s.complete).lower()}, scopes {s.scopes}, "
                    f"unmatched begins {s.unmatched_begins}, unmatched ends {s.unmatched_ends}, "
                    f"parse errors {s.parse_errors}, max depth {s.max_depth}, wedged scopes {len(s.wedged)}, "
                    f"finished: {fin.reason}")
        text.extend(f"{f.severity} {f.rule}: {f.message}" for f in fin.findings)
    labels.append(f"version {meta.version}" if meta is not None else "no metadata line")
    labels.append(f"time: {axis} = 1 record (ts = line)")
    return labels, "; ".join(text)


def verdict_kind(v: Verdict) -> str:
    """The verdict's kind as a track name: ``WEDGED``, ``CUT SHORT``, ``HEALTHY`` ..."""
    return v.kind.replace("_", " ").upper()


def verdict_title(v: Verdict) -> str:
    """The verdict's short text with its kind in capitals, a process label:
    ``WEDGED nested_orch.cpp:75, ring 3 task_window, FLOW_CONTROL_DEADLOCK``."""
    short, words = v.short, v.kind.replace("_", " ")
    return verdict_kind(v) + short[len(words):] if short.startswith(words) else f"{verdict_kind(v)}: {short}"


def verdict_span(v: Verdict, at: int) -> tuple[int, int]:
    """Where a run's verdict slice lies on the time axis: from the wedged scope's begin (a wedge) or the first
    line to the run's end ``at``, at least one tick long."""
    start = v.line if v.kind == "wedged" and v.line > 0 else 1
    return start, max(at, start + 1)


VERDICT_DESCRIPTION = ("the run's one verdict (ringtrace.stages.verdict, as summary and check say it): the slice "
                       "is its short text, its args verdict_kind, verdict_severity, verdict_text; a wedge's slice "
                       "runs from the wedged scope's begin record to the run's end")
