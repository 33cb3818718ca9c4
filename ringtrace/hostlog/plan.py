"""The command side of host logs: which logs a read uses (``--host-log FILE``, a log given as PATH, the
logs found in the runs' folders) and ``check --expect``.

Which host logs a read by ``summary``, ``check``, ``convert`` or ``advise`` uses (:func:`plan_for_read`):

* **Given.**  Every ``--host-log`` file (repeatable; globs, ``**`` too), and every PATH that is not a
  scope_stats file (:func:`ringtrace.sources.paths.find_inputs`: not ``*.jsonl``, and named ``*.log`` or not
  starting with a JSON object) that the host-log parser recognises: it reports a failure or holds any
  line the parser knows (a malformed known line included).  A PATH that is neither is an input error
  (exit 2): ``PATH: not a scope_stats file (its first line is not a JSON object) and not a host log``.
* **Found**, without any flag.  For each scope_stats file, the ``*.log`` files directly in its run
  folder (:func:`ringtrace.hostlog.match.run_root`: the work dir of an L2 run, the out dir of an L3
  run, a scene test's ``outputs/<case>_<ts>``) and directly in the folder holding its ``scope_stats/``
  folder (an L2 run's ``dfx_outputs/``, an L3 file's ``d<K>/``), never deeper; and every ``*.log`` file a
  directory argument's walk finds (so a run folder holding a log and no scope_stats file is a run).
  A found file is a host log when it is named ``host.log`` (the harness's name for it: kept even when
  it holds no line the parser knows, as a passing run's log at the default log level) or when the
  parser recognises a line of it; any other ``*.log`` (a build or test-runner log) is skipped without
  a word.  Found logs are read up to :data:`~ringtrace.hostlog.read.MAX_LOG_BYTES`.

Matching (:mod:`ringtrace.hostlog.match`; a log is a run of the folder it lies in): the given logs
first, then the found ones; a file that took a given log keeps it (a found log that would have
matched it is dropped, with a note).  The files' metadata lines are read first, so that a log whose
capacities contradict a file's metadata is another run, never paired (a note says which ring and
both values).  A log none of whose parts matched a file:

* that has no file in its directory tree, or is another run's: a run of its own, known from the log
  alone (:func:`ringtrace.hostlog.parse.log_only_run`): one per part that reports a failure, else one whose
  verdict is that the log reports no failure.  For a *given* log beside files a note says why it was
  not paired (it lies outside the file's run folder);
* that is ambiguous (several files in its tree and its lines do not say which) or whose file took
  another log: a run of its own for each part that reports a failure (a given log), else a note.

A directory argument holding no scope_stats file is no error when a host log under it is used.
"""

from __future__ import annotations

import glob
import re
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import zstandard

from ringtrace.hostlog.match import LogMatch, match_logs, run_root
from ringtrace.hostlog.parse import is_log_only, log_only_run
from ringtrace.hostlog.read import MAX_LOG_BYTES, read_log
from ringtrace.model.records import RESOURCES, HostLog, Meta, RunFinished, SinkEvent, utf8
from ringtrace.model.runtime import BY_NAME, COMPILE_DEFAULTS, RINGS
from ringtrace.sources.files import open_input
from ringtrace.sources.paths import DIR_NAME, HOST_LOG_NAME, LOG_SUFFIX, Inputs, empty_dir_message
from ringtrace.stages.decode import Decoder
from ringtrace.stages.diagnose import Thresholds, fmt_amount

MAX_META_LINE = 1 << 20
"""A metadata line is a few hundred bytes; a longer first line is not read for the capacity check."""


class Plan(msgspec.Struct):
    """Host logs matched to files: ``for_file`` feeds the runs, ``log_only`` are runs with no file."""

    for_file: dict[Path, HostLog]
    log_only: list[HostLog]
    notes: list[str]  # unmatched logs and why (stderr)
    errors: list[str]  # unreadable logs, patterns matching nothing, PATHs that are nothing (exit 2)
    problems: list[str]  # malformed known lines, as path:line: severity: message (stderr)


class LogFile(msgspec.Struct, frozen=True):
    """One host log file read: its parts (one per rank of an L3 log) and whether it was given.  ``beside``:
    found only in the folder of a file named on its own (no directory argument's walk found it), so it may
    join that one run and is never a run of its own."""

    path: Path
    parts: tuple[HostLog, ...]
    given: bool
    beside: bool = False


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


def recognised(parts: Sequence[HostLog]) -> bool:
    """The parser knows something in the log: a failure, or any line it reads (a malformed one too;
    a missing last newline alone is not)."""
    return any(p.failed or p.ring_sizes is not None or p.orch_error_code is not None or p.sched_error_code is not None
               or p.runtime_status is not None or p.error_detail is not None or p.error_hint is not None
               or p.run_status or p.written or p.not_written
               or any(pr.reason == "malformed_host_log" for pr in p.problems) for p in parts)


def binary(path: Path) -> bool:
    """The file's first 64 KiB hold a NUL byte or are not UTF-8: no log a runtime writes (an executable,
    an archive, an image).  A file that cannot be read is not called binary (reading it says why)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(64 << 10)
    except OSError:
        return False
    if b"\x00" in head:
        return True
    cut = head.rfind(b"\n") + 1 if len(head) == 64 << 10 else len(head)  # a character may be cut at the end
    try:
        head[:cut or len(head)].decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def run_folder_logs(file: Path) -> list[Path]:
    """The ``*.log`` files directly in ``file``'s run folder (``run_root``) and directly in the folder
    holding its ``scope_stats/`` folder, sorted, each once."""
    folders = [Path(run_root(file))]
    if file.parent.name == DIR_NAME:
        folders.append(file.parent.parent)
    out: list[Path] = []
    for folder in dict.fromkeys(folders):
        try:
            out += sorted(p for p in folder.iterdir() if p.suffix == LOG_SUFFIX and p.is_file())
        except OSError:
            continue  # a folder that cannot be listed holds no log for us
    return out


def read_meta(path: Path) -> Meta | None:
    """The metadata line of a scope_stats file, or None when it cannot be read (the read says why)."""
    first = b""
    try:
        with open_input(path) as fh:  # the one opener: a gzip or zstd file's line too
            while b"\n" not in first and len(first) < MAX_META_LINE:
                chunk = fh.read(min(64 << 10, MAX_META_LINE - len(first)))
                if not chunk:
                    break
                first += chunk
    except (OSError, EOFError, zlib.error, zstandard.ZstdError):
        return None
    dec = Decoder()
    dec.feed(first.split(b"\n", 1)[0] + b"\n")
    return dec.meta


def _read(path: Path, limit: int | None, errors: list[str]) -> tuple[HostLog, ...] | None:
    try:
        return read_log(path, limit)
    except OSError as err:
        errors.append(f"{utf8(str(path))}: cannot read: {err.strerror or err}")
        return None


def _name(log: HostLog) -> str:
    return log.path + (f" (rank {log.rank})" if log.rank is not None else "")


def _match(logs: Sequence[LogFile], keys: Sequence[str], metas: Mapping[str, Meta | None]) -> list[list[LogMatch]]:
    """match_logs over every part of ``logs`` (by their resolved paths), regrouped per log file; each
    match carries the part as read (its path as given)."""
    parts = [(i, part) for i, lf in enumerate(logs) for part in lf.parts]
    where = [msgspec.structs.replace(part, path=str(logs[i].path.resolve())) for i, part in parts]
    out: list[list[LogMatch]] = [[] for _ in logs]
    for (i, part), m in zip(parts, match_logs(where, keys, metas), strict=True):
        out[i].append(msgspec.structs.replace(m, log=part))
    return out


def _outside(log: LogFile, files: Sequence[Path]) -> str:
    """Why a given log was not paired with the files read: none is in its folder's tree."""
    root = log.path.parent
    if len(files) != 1:
        return (f"not paired: none of the {len(files)} scope_stats files read lies in its folder ({utf8(str(root))}) "
                "or below, and a log is the run of the folder it lies in")
    file = files[0]
    run = Path(run_root(file))
    where = ("it lies below that file's run folder" if log.path.resolve().is_relative_to(run.resolve())
             else "it lies outside that file's run folder")
    return f"not paired with {utf8(str(file))}: {where} ({utf8(str(run))}), so it is another run's"


def _decide(plan: Plan, log: LogFile, matches: Sequence[LogMatch], files: Mapping[str, Path],
            taken: Mapping[str, str]) -> bool:
    """Put ``log``'s parts into ``plan``; returns whether the log is used (paired or a run)."""
    used = False
    for m in matches:
        if m.file is None:
            continue
        if not log.given and m.file in taken:
            plan.notes.append(f"host log {_name(m.log)}: not used: {utf8(str(files[m.file]))} has the host log "
                              f"given, {taken[m.file]}")
            continue
        plan.for_file[files[m.file]] = m.log
        used = True
    if any(m.file is not None for m in matches):
        for m in matches:
            if m.file is None:
                plan.notes.append(f"host log {_name(m.log)}: not matched to a scope_stats file: {utf8(m.reason)}")
        return used
    if log.beside:  # a file named on its own is that one run: another run's log beside it is left alone
        for m in matches:
            plan.notes.append(f"host log {_name(m.log)}: not read: {utf8(m.reason)} (the file was named on its "
                              "own: give the log or its folder as a PATH to read it as a run)")
        return False
    own = [i for i, m in enumerate(matches) if m.kind in ("outside", "other_run")]
    runs = [i for i in own if matches[i].log.failed] or own[:1]
    for i, m in enumerate(matches):
        if i in runs:
            plan.log_only.append(m.log)
            used = True
        elif i not in own and m.log.failed and (log.given or m.kind != "taken"):
            plan.log_only.append(m.log)
            used = True
            plan.notes.append(f"host log {_name(m.log)}: reported as a run without records: {utf8(m.reason)}")
        elif i not in own:
            plan.notes.append(f"host log {_name(m.log)}: not matched to a scope_stats file: {utf8(m.reason)}")
        if m.kind == "other_run" and m.candidate is not None:
            plan.notes.append(f"host log {_name(m.log)} {utf8(m.reason)} with {utf8(str(files[m.candidate]))}"
                              + ("; reported as a run of its own" if i in runs else ""))
    if own and log.given and files and not any(matches[i].kind == "other_run" for i in own):
        plan.notes.append(f"host log {log.parts[0].path}: {_outside(log, list(files.values()))}; "
                          "reported as a run of its own")
    return used


def _use(plan: Plan, logs: Sequence[LogFile], files: Sequence[Path]) -> list[Path]:
    """Match ``logs`` to ``files`` into ``plan`` (given logs first: they win); returns the logs used."""
    if not logs:
        return []
    by_key = {str(f.resolve()): f for f in files}
    metas = {k: read_meta(f) for k, f in by_key.items()}  # one short read each, for the capacity check
    given = [lf for lf in logs if lf.given]
    others = [lf for lf in logs if not lf.given]
    matched = _match(given, list(by_key), metas) + _match(others, list(by_key), metas)
    taken = {m.file: m.log.path for ms in matched[:len(given)] for m in ms if m.file is not None}
    used: list[Path] = []
    for lf, ms in zip([*given, *others], matched, strict=True):
        if _decide(plan, lf, ms, by_key, taken) or lf.given:
            used.append(lf.path)
            for prob in lf.parts[0].problems:
                plan.problems.append(f"{lf.parts[0].path}:{prob.line}: {prob.severity}: {prob.message}")
    return used


def plan_for_read(patterns: Sequence[str], paths: Sequence[str], found: Inputs) -> tuple[list[Path], Plan]:
    """The scope_stats files to read and the host-log plan for them (see the module docstring), from
    the ``--host-log`` patterns, the PATH arguments and what :func:`ringtrace.sources.paths.find_inputs` found
    in them.  Input errors (exit 2) are in ``plan.errors``, ``found.errors`` first."""
    plan = Plan({}, [], [], list(found.errors), [])
    if not patterns and not paths:
        plan.errors.append("nothing to read: give a PATH and/or --host-log FILE")
        return [], plan
    files = list(found.files)
    named, errors = expand(patterns)
    plan.errors += errors
    logs: list[LogFile] = []
    seen: set[Path] = set()
    for path in named:
        parts = _read(path, None, plan.errors)
        if parts is not None and not recognised(parts) and binary(path):
            plan.errors.append(f"--host-log {utf8(str(path))}: not a host log (binary data, not the runtime's log)")
            continue
        if parts is not None:
            seen.add(path.resolve())
            logs.append(LogFile(path, parts, True))
    for cand in found.candidates:
        if cand.path.resolve() in seen:
            continue
        parts = _read(cand.path, None, plan.errors)
        if parts is None:
            continue
        if recognised(parts):
            seen.add(cand.path.resolve())
            logs.append(LogFile(cand.path, parts, True))
        elif cand.json:
            files.append(cand.path)  # a scope_stats file named *.log
        else:
            why = "it is empty" if cand.empty else "its first line is not a JSON object"
            plan.errors.append(f"{utf8(str(cand.path))}: not a scope_stats file ({why}) and not a host log")
    walked = {p.resolve() for p in found.logs}
    named = [f for f in files if str(f) in paths]  # a file named on its own: that one run
    beside = {p.resolve() for f in named for p in run_folder_logs(f)} - walked
    for path in [*found.logs, *(p for f in files for p in run_folder_logs(f))]:
        if path.resolve() in seen:
            continue
        seen.add(path.resolve())
        parts = _read(path, MAX_LOG_BYTES, plan.notes)  # a log nobody named: unreadable is a note, not an error
        if parts is not None and not recognised(parts) and binary(path):
            plan.notes.append(f"{utf8(str(path))}: not a host log (binary data): not read")
            continue
        if parts is not None and (path.name == HOST_LOG_NAME or recognised(parts)):
            logs.append(LogFile(path, parts, False, path.resolve() in beside))
    used = _use(plan, logs, files)
    for d in found.empty_dirs:
        root = Path(d).resolve()
        if not any(p.resolve().is_relative_to(root) for p in used):
            plan.errors.append(empty_dir_message(d, found.other_jsonl.get(d, [])))
    return files, plan


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
    r = BY_NAME.get(resource)
    return f"{fmt_amount(resource, n)} ({n})" if r is not None and r.bytes and n >= 1024 else str(n)


def expect_reasons(fin: RunFinished, expect: Expect | None) -> list[str]:
    """``check --expect``: the sizes that differ from the metadata's or the log's ``Ring buffer sizes`` (each
    ring named, both values).  ``Ring buffer sizes`` is never required: ``--expect`` compares with the
    metadata alone when the log has no such line."""
    out: list[str] = []
    log = fin.host_log
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
