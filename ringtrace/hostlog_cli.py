"""The command side of host logs: ``--host-log FILE`` (repeatable, globs) and ``check --expect``.

:func:`prepare` reads and parses the logs (blocking I/O: the one-shot commands only) and matches
them to the scope_stats files (:mod:`ringtrace.hostlog_match`); :func:`log_only_events` makes the
runs known from a log alone; :func:`parse_expect` and :func:`check_reasons` are the ``check`` gate.
"""

from __future__ import annotations

import glob
import re
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ringtrace.diagnose import Thresholds, describe_log, fmt_amount
from ringtrace.hostlog import is_log_only, log_only_run
from ringtrace.hostlog_match import match_logs
from ringtrace.records import RESOURCES, HostLog, RunFinished, SinkEvent, utf8
from ringtrace.tail.hostlogs import read_log

COMPILE_DEFAULTS = {"task_window": 16384, "heap": 256 << 20, "dep_pool": 16384}
"""The a2a3 compile defaults a ``0`` in ``--expect`` stands for (the guide's §1 table)."""
RINGS = 4


class Plan(msgspec.Struct):
    """Host logs matched to files: ``for_file`` feeds the runs, ``log_only`` are runs with no file."""

    for_file: dict[Path, HostLog]
    log_only: list[HostLog]
    notes: list[str]  # unmatched logs and why (stderr)
    errors: list[str]  # unreadable logs, patterns matching nothing (exit 2)
    problems: list[str]  # malformed known lines, as path:line: severity: message (stderr)


def expand(patterns: Sequence[str]) -> tuple[list[Path], list[str]]:
    """Files named or matched by ``patterns`` (globs, ``**`` included), each once, in order."""
    out: list[Path] = []
    errors: list[str] = []
    seen: set[Path] = set()
    for pat in patterns:
        if glob.has_magic(pat):
            hits = sorted(Path(p) for p in glob.glob(pat, recursive=True) if Path(p).is_file())
            if not hits:
                errors.append(f"--host-log {utf8(pat)}: no file matches this pattern")
        else:
            p = Path(pat)
            hits = [p] if p.is_file() else []
            if not hits:
                errors.append(f"--host-log {utf8(pat)}: " + ("not a regular file" if p.exists() else "no such file"))
        for h in hits:
            if h.resolve() not in seen:
                seen.add(h.resolve())
                out.append(h)
    return out, errors



def prepare(patterns: Sequence[str], files: Sequence[Path]) -> Plan:
    """Read the logs ``patterns`` name and match them to ``files`` (see :mod:`ringtrace.hostlog_match`).

    A log file none of whose parts matched a file is a log-only run for each part that reports a
    failure; everything else unmatched is a note.
    """
    plan = Plan({}, [], [], [], [])
    paths, plan.errors = expand(patterns)
    logs: list[HostLog] = []
    where: list[str] = []  # each log's real path, resolved, for matching
    for path in paths:
        try:
            parts = read_log(path)
        except OSError as err:
            plan.errors.append(f"{utf8(str(path))}: cannot read: {err.strerror or err}")
            continue
        logs += parts
        where += [str(path.resolve())] * len(parts)
        for prob in parts[0].problems:
            plan.problems.append(f"{parts[0].path}:{prob.line}: {prob.severity}: {prob.message}")
    resolved = {str(f.resolve()): f for f in files}
    matches = match_logs([msgspec.structs.replace(lg, path=w) for lg, w in zip(logs, where, strict=True)],
                         list(resolved))
    matched = {w for w, m in zip(where, matches, strict=True) if m.file is not None}
    for log, w, m in zip(logs, where, matches, strict=True):
        name = log.path + (f" (rank {log.rank})" if log.rank is not None else "")
        if m.file is not None:
            plan.for_file[resolved[m.file]] = log
        elif w not in matched and log.failed:
            plan.log_only.append(log)
            if files:
                plan.notes.append(f"host log {name}: reported as a run without records: {utf8(m.reason)}")
        else:
            plan.notes.append(f"host log {name}: not matched to a scope_stats file: {utf8(m.reason)}")
    return plan


def covered_dirs(patterns: Sequence[str], paths: Sequence[str]) -> set[str]:
    """The directory arguments (of ``paths``) that hold one of the host logs: not an error without
    scope_stats files, since the log reports that run."""
    logs, _ = expand(patterns)
    out: set[str] = set()
    for raw in paths:
        d = Path(raw)
        if d.is_dir() and any(lg.resolve().is_relative_to(d.resolve()) for lg in logs):
            out.add(raw)
    return out


def log_only_events(plan: Plan, thresholds: Thresholds) -> list[SinkEvent]:
    """RunStarted + RunFinished for each log-only run (labels read off the log's path)."""
    out: list[SinkEvent] = []
    for log in plan.log_only:
        out += log_only_run(log, thresholds)
    return out


def display_path(fin: RunFinished) -> str:
    """The path a person is shown for ``fin``: its file, or its host log for a log-only run."""
    if is_log_only(fin) and fin.host_log is not None:
        return f"(no scope_stats file; host log {fin.host_log.path})"
    return fin.source.display_path


# -- check --expect ----------------------------------------------------------------------------

Expect = dict[str, tuple[int, ...]]
_NUMBER = re.compile(r"^(\d+)\s*(?:([kmgt])(?:i?b)?|b)?$", re.IGNORECASE)
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ExpectError(ValueError):
    """A ``--expect`` value that cannot be read; the message says what is wrong (exit 2)."""


def parse_size(text: str) -> int:
    """``2G`` = 2 GiB, ``512K``, ``1MiB``, ``64``, ``2 * 1024 * 1024`` (binary units, as the runtime's sizes)."""
    value = 1
    for factor in text.split("*"):
        m = _NUMBER.match(factor.strip())
        if m is None:
            raise ExpectError(f"{text.strip()!r} is not a size (e.g. 16384, 512K, 2G, 2*1024*1024)")
        value *= int(m.group(1)) * (_UNITS[m.group(2).lower()] if m.group(2) else 1)
    return value


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [*parts, cur]


def parse_expect(values: Sequence[str]) -> Expect:
    """``task_window=16,heap=(0,0,2G,0),dep_pool=0`` (repeatable) -> resource -> the 4 ring sizes expected.

    A scalar applies to all four rings; ``0`` stands for the compile default.  Raises :class:`ExpectError`.
    """
    out: Expect = {}
    for value in values:
        for item in _split_top(value):
            if not item.strip():
                continue
            name, eq, spec = item.partition("=")
            name, spec = name.strip(), spec.strip()
            if not eq or not spec:
                raise ExpectError(f"--expect {value}: {item.strip()!r} is not RESOURCE=SIZE "
                                  f"(e.g. task_window=16,heap=(0,0,2G,0))")
            if name not in RESOURCES:
                raise ExpectError(f"--expect {value}: unknown resource {name!r}; expected {', '.join(RESOURCES)}")
            if spec[0] in "([":
                if spec[-1] not in ")]":
                    raise ExpectError(f"--expect {value}: {spec!r}: unclosed tuple")
                rings = spec[1:-1].split(",")
                if len(rings) != RINGS:
                    raise ExpectError(f"--expect {value}: {name} needs one value or {RINGS} (one per ring), "
                                      f"got {len(rings)}")
            else:
                rings = [spec] * RINGS
            try:
                sizes = tuple(parse_size(r) or COMPILE_DEFAULTS[name] for r in rings)
            except ExpectError as err:
                raise ExpectError(f"--expect {value}: {name}: {err}") from None
            out[name] = sizes
    if not out:
        raise ExpectError("--expect: nothing to compare (e.g. --expect task_window=16,heap=2G)")
    return out


def _amount(resource: str, n: int) -> str:
    return f"{fmt_amount(resource, n)} ({n})" if resource == "heap" and n >= 1024 else str(n)


def check_reasons(fin: RunFinished, expect: Expect | None) -> list[str]:
    """Why ``fin`` fails the gate on host-log grounds: a failure the log reports, and ``--expect`` sizes
    that differ from the metadata's or the log's ``Ring buffer sizes`` (each ring named, both values)."""
    out: list[str] = []
    log = fin.host_log
    for f in fin.findings:
        if f.rule == "failed":
            out.append(f.message)
        elif f.rule == "wedged" and f.confirmed is not None and log is not None:
            out.append(("host log: " if f.confirmed else "host log, disagreeing with the records: ")
                       + describe_log(log))
    if not expect:
        return out
    meta = fin.summary.meta
    sizes = log.ring_sizes if log is not None else None
    for res, want in expect.items():
        have_meta: tuple[int, ...] = getattr(meta, f"{res}_max") if meta is not None else ()
        have_log: tuple[int, ...] = getattr(sizes, res) if sizes is not None else ()
        for ring, e in enumerate(want):
            m = have_meta[ring] if ring < len(have_meta) else None
            g = have_log[ring] if ring < len(have_log) else None
            if m is not None and m != e:
                out.append(f"ring {ring} {res}: expected {_amount(res, e)}, the metadata says {_amount(res, m)}")
            if g is not None and g != e:
                out.append(f"ring {ring} {res}: expected {_amount(res, e)}, the host log's 'Ring buffer sizes' "
                           f"line says {_amount(res, g)}")
            if m is None and g is None:
                out.append(f"ring {ring} {res}: expected {_amount(res, e)}, but neither a metadata line nor a "
                           "host log 'Ring buffer sizes' line says what the runtime used")
    return out


def plan_for_read(patterns: Sequence[str], paths: Sequence[str], files: Sequence[Path],
                  errors: list[str]) -> tuple[Plan | None, list[str]]:
    """The host-log plan for a read of ``files`` (None without ``--host-log``) and the input errors:
    a directory argument holding one of the logs is no error for lacking scope_stats files."""
    if not patterns:
        return None, errors + ([] if paths else ["nothing to read: give a PATH and/or --host-log FILE"])
    covered = covered_dirs(patterns, paths)
    errors = [e for e in errors if not any(e.startswith(f"{d}: no scope_stats files") for d in covered)]
    plan = prepare(patterns, files)
    return plan, errors + plan.errors
