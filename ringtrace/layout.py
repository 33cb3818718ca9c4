"""Paths -> sources: which files are scope_stats files, and the labels their place gives them.

Layouts (see the format doc):

* L2:    ``<work_dir>/dfx_outputs/scope_stats/scope_stats.jsonl``            -> run = work_dir
* L3:    ``<out_dir>/dfx_outputs/rank<N>/d<K>/scope_stats/scope_stats.jsonl`` -> run, rank N, dispatch K
         (``d<K>/dispatch_program.json`` names the program)
* scene: ``outputs/<case>_<ts>/scope_stats/scope_stats.jsonl``              -> run = <case>_<ts>

:func:`labels_for` is pure; :func:`find_sources` and :func:`read_program` touch the disk.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePath

from ringtrace.records import Labels, utf8

FILE_NAME = "scope_stats.jsonl"
DIR_NAME = "scope_stats"
PROGRAM_FILE = "dispatch_program.json"
_RANK = re.compile(r"rank(\d+)$")
_DISPATCH = re.compile(r"d(\d+)$")


def is_scope_stats(path: PurePath) -> bool:
    """A file this tool follows inside a directory: ``scope_stats.jsonl``, or ``*.jsonl`` in ``scope_stats/``."""
    return path.name == FILE_NAME or (path.suffix == ".jsonl" and path.parent.name == DIR_NAME)


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
    """Expand files and directories into scope_stats files; returns (files, errors).

    A missing path or a directory holding no scope_stats file is an error message; the
    other inputs are still returned.
    """
    files: list[Path] = []
    errors: list[str] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted((f for f in p.rglob("*.jsonl") if is_scope_stats(f) and f.is_file()), key=sort_key)
            if not found:
                errors.append(f"{raw}: no scope_stats files in this directory (looked for */{DIR_NAME}/*.jsonl)")
        elif p.is_file():
            found = [p]
        elif p.exists():
            errors.append(f"{raw}: not a regular file or directory")
            found = []
        else:
            errors.append(f"{raw}: no such file or directory")
            found = []
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                files.append(f)
    return files, errors


def source_labels(path: Path) -> Labels:
    """Labels for a file on disk, with the program name when the L3 folder names one."""
    lab = labels_for(path)
    if lab.dispatch:
        program = read_program(path)
        if program:
            return Labels(lab.run, lab.rank, lab.dispatch, program)
    return lab
