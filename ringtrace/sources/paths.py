"""Paths -> sources: which files are scope_stats files, and the labels their place gives them.

Layouts (see the format doc):

* L2:    ``<work_dir>/dfx_outputs/scope_stats/scope_stats.jsonl``            -> run = work_dir
* L3:    ``<out_dir>/dfx_outputs/rank<N>/d<K>/scope_stats/scope_stats.jsonl`` -> run, rank N, dispatch K
         (``d<K>/dispatch_program.json`` names the program)
* scene: ``outputs/<case>_<ts>/scope_stats/scope_stats.jsonl``              -> run = <case>_<ts>

:func:`labels_for` is pure; :func:`find_sources`, :func:`find_inputs` and :func:`read_program` touch
the disk.

What a read's inputs are (:func:`find_inputs`, for ``summary``, ``check``, ``convert``, ``advise``):

* a directory is walked once, recursively: its scope_stats files (:func:`is_scope_stats`) and its
  ``*.log`` files (:data:`LOG_SUFFIX`; whether one is a host log is decided by parsing it, in
  :mod:`ringtrace.gather.plan`);
* a file is a scope_stats file when its name says so (:func:`is_scope_stats`, or any ``*.jsonl``) or,
  unless it is named ``*.log``, when its first bytes are a JSON object (after a UTF-8 byte order mark
  and white space); anything else given as a file (a ``*.log``, binary data, text) may be a host log
  and is returned as such a candidate, with whether its first bytes look like a JSON object.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePath

import msgspec

from ringtrace.model.records import Labels, utf8

FILE_NAME = "scope_stats.jsonl"
DIR_NAME = "scope_stats"
PROGRAM_FILE = "dispatch_program.json"
LOG_SUFFIX = ".log"
HOST_LOG_NAME = "host.log"
SNIFF_BYTES = 4096
_BOM = b"\xef\xbb\xbf"
_RANK = re.compile(r"rank(\d+)$")
_DISPATCH = re.compile(r"d(\d+)$")


def is_scope_stats(path: PurePath) -> bool:
    """A file this tool follows inside a directory: ``scope_stats.jsonl``, or ``*.jsonl`` in ``scope_stats/``."""
    return path.name == FILE_NAME or (path.suffix == ".jsonl" and path.parent.name == DIR_NAME)


COMPRESSED = (".gz", ".zst")
"""Suffixes of a kept (compressed) scope_stats file: the one-shot commands read them transparently;
``watch`` does not follow them (the runtime writes plain files)."""


def is_scope_stats_archive(path: PurePath) -> bool:
    """``scope_stats.jsonl.gz`` / ``.zst`` (or ``*.jsonl.gz`` in ``scope_stats/``)."""
    return path.suffix in COMPRESSED and is_scope_stats(path.with_suffix(""))


def labels_for(path: PurePath) -> Labels:
    """Run, rank and dispatch read off ``path`` (empty where the layout has none)."""
    parts = path.parent.parts
    i = len(parts)
    if i and parts[i - 1] == DIR_NAME:
        i -= 1
    rank = dispatch = ""
    if i >= 2 and _DISPATCH.match(parts[i - 1]) and _RANK.match(parts[i - 2]):
        dispatch = parts[i - 1][1:]
        rank = parts[i - 2][4:]
        i -= 2
    if i and parts[i - 1] == "dfx_outputs":
        i -= 1
    run = utf8(parts[i - 1]) if i else ""
    return Labels(run=run, rank=rank, dispatch=dispatch)


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


def run_folder(path: str, host_log: str = "") -> PurePath:
    """Where one run is: :func:`run_root` of its scope_stats file (the file itself when it lies in no layout:
    named by hand, it is a run of its own), else (a run known from its host log alone) the log's folder."""
    if not path:
        return PurePath(host_log).parent
    file = PurePath(path)
    return run_root(file) if is_scope_stats(file) or is_scope_stats_archive(file) else file


def distinct_names(names: Sequence[str], folders: Sequence[PurePath]) -> list[str]:
    """``names`` (one per run, same order as ``folders``, the runs' folders), each made unique where it is
    not: a name several runs in different folders share becomes the shortest tail of its folder's path that
    no other of those folders ends with (``a/outputs/TestX_20261130_101210``), then whatever followed the
    folder's name in the name (``/rank0/d0``)."""
    out = list(names)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    for members in groups.values():
        if len({folders[i] for i in members}) < 2:
            continue
        for i in members:
            parts = folders[i].parts
            others = {folders[j].parts for j in members if folders[j] != folders[i]}
            k = next((k for k in range(1, len(parts) + 1) if all(o[-k:] != parts[-k:] for o in others)), len(parts))
            tail = "/".join(parts[-k:])
            rest = names[i].split("/", 1)[1] if "/" in names[i] else ""
            out[i] = f"{tail}/{rest}" if rest else tail
    return out


def read_program(path: Path) -> str:
    """The program named by ``dispatch_program.json`` beside an L3 file's ``scope_stats/`` folder, or ""."""
    candidate = (path.parent.parent if path.parent.name == DIR_NAME else path.parent) / PROGRAM_FILE
    try:
        data = json.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    if isinstance(data, str):
        return data
    if isinstance(data, dict):
        for key in ("program", "name", "program_name", "callable"):
            value = data.get(key)
            if isinstance(value, str):
                return value
    return ""


def sort_key(path: Path) -> tuple[str, int, int, str]:
    lab = labels_for(path)
    return (lab.run, int(lab.rank or -1), int(lab.dispatch or -1), str(path))


def find_sources(paths: list[str]) -> tuple[list[Path], list[str]]:
    """The scope_stats files of ``paths`` and the input errors (a missing path, a directory holding
    none): :func:`find_inputs` without the host logs (a file named on the command line is read as given)."""
    found = find_inputs(paths)
    errors = [*found.errors, *(empty_dir_message(d, found.other_jsonl.get(d, []), logs=False)
                               for d in found.empty_dirs)]
    return [*found.files, *(c.path for c in found.candidates)], errors


class Candidate(msgspec.Struct, frozen=True):
    """A file given as PATH that is not a scope_stats file by its name or first bytes: maybe a host log.
    ``json``: its first bytes are a JSON object anyway (a ``*.log`` file); ``empty``: it has no bytes."""

    path: Path
    json: bool = False
    empty: bool = False


class Inputs(msgspec.Struct):
    """What :func:`find_inputs` found.  ``files``: scope_stats files, each once (a directory's sorted
    as :func:`sort_key`); ``logs``: the ``*.log`` files directory walks found, each once;
    ``candidates``: files given as PATH that may be host logs; ``empty_dirs``: directory arguments
    holding no scope_stats file (an error unless a host log of theirs is a run); ``other_jsonl``: for each
    of those, the ``*.jsonl`` files it holds under other names (not read: see :func:`empty_dir_message`);
    ``errors``: missing and irregular paths."""

    files: list[Path]
    logs: list[Path]
    candidates: list[Candidate]
    empty_dirs: list[str]
    errors: list[str]
    other_jsonl: dict[str, list[Path]] = msgspec.field(default_factory=dict)


MAX_NAMED = 5
"""How many of a directory's other ``*.jsonl`` files its message names."""


def empty_dir_message(directory: str, others: list[Path], logs: bool = True) -> str:
    """The error for a directory argument holding no scope_stats file (``logs``: and no host log); when it
    holds ``*.jsonl`` files under other names, names them and says how to read them (a directory's walk
    takes only ``scope_stats.jsonl`` and ``scope_stats/*.jsonl``: a file named as PATH is read whatever its
    name)."""
    text = (f"{utf8(directory)}: no scope_stats files in this directory (looked for */{DIR_NAME}/*.jsonl)"
            + (f" and no host log (*{LOG_SUFFIX})" if logs else ""))
    if not others:
        return text
    shown = ", ".join(utf8(str(p)) for p in others[:MAX_NAMED])
    more = f" and {len(others) - MAX_NAMED} more" if len(others) > MAX_NAMED else ""
    return (f"{text}; it holds {len(others)} .jsonl file(s) under other names, not read: {shown}{more}; "
            "name each as a PATH to read it")


def _sniff(path: Path) -> tuple[bool, bool]:
    """(first bytes are a JSON object, file is empty); a file that cannot be opened counts as JSON
    (so that reading it reports why it cannot be read)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return True, False
    body = head[len(_BOM):] if head.startswith(_BOM) else head
    return body.lstrip(b" \t\r\n").startswith(b"{"), not head


def walk_files(directory: Path, onerror: Callable[[OSError], None] | None = None,
               special: bool = False) -> Iterator[Path]:
    """Every regular file below ``directory`` (with ``special``, FIFOs, sockets and devices too, for a
    caller that says why it skips them): the one directory walk of every command.

    Symbolic links are not followed inside a walk: a link to a file or to a directory is skipped, so a
    tree is read once however many links point into it (``summary DIR``, ``convert DIR`` and ``watch DIR``
    see the same runs).  A path given on the command line is read even when it is a link."""
    stack = [str(directory)]
    while stack:  # os.scandir's entry types come with the listing: no stat per file
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as err:
            if onerror is not None:
                onerror(err)
            continue
        subdirs = []
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                subdirs.append(e.path)
            elif e.is_file(follow_symlinks=False) or (special and not e.is_symlink()):
                yield Path(e.path)
        stack.extend(reversed(subdirs))


def find_inputs(paths: list[str]) -> Inputs:
    """Expand files and directories into scope_stats files, the ``*.log`` files under the directories
    and the files that may be host logs (see the module docstring).  One walk per directory."""
    out = Inputs([], [], [], [], [])
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        found: list[Path] = []
        if p.is_dir():
            logs: list[Path] = []
            others: list[Path] = []
            for f in walk_files(p):
                if f.suffix == LOG_SUFFIX:
                    logs.append(f)
                elif is_scope_stats(f) or is_scope_stats_archive(f):
                    found.append(f)
                elif f.suffix == ".jsonl" or (f.suffix in COMPRESSED and f.with_suffix("").suffix == ".jsonl"):
                    others.append(f)
            found.sort(key=sort_key)
            if not found:
                out.empty_dirs.append(raw)
                if others:
                    out.other_jsonl[raw] = others
            for log in sorted(logs):
                key = log.resolve()
                if key not in seen:
                    seen.add(key)
                    out.logs.append(log)
        elif p.is_file():
            if is_scope_stats(p) or p.suffix == ".jsonl" or p.suffix in COMPRESSED:
                found = [p]
            else:
                looks_json, empty = _sniff(p)
                if looks_json and p.suffix != LOG_SUFFIX:
                    found = [p]
                elif p.resolve() not in seen:
                    seen.add(p.resolve())
                    out.candidates.append(Candidate(p, looks_json, empty))
        elif p.exists():
            out.errors.append(f"{utf8(raw)}: not a regular file or directory")
        else:
            out.errors.append(f"{utf8(raw)}: no such file or directory")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.files.append(f)
    return out


def source_labels(path: Path) -> Labels:
    """Labels for a file on disk, with the program name when the L3 folder names one."""
    lab = labels_for(path)
    if lab.dispatch:
        program = read_program(path)
        if program:
            return Labels(lab.run, lab.rank, lab.dispatch, program)
    return lab
