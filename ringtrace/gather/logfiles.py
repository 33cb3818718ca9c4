"""Which files are host logs, and the little a pairing reads of a scope_stats file.  Blocking reads: the
caller's thread (a one-shot command, or the tailer's reader thread).

A file is a host log when the parser recognises a line of it (:func:`recognised`) or, found without being
named, when it is called ``host.log``; never when it is binary (:func:`binary`).  The logs found without
``--host-log`` lie directly in a file's run folder or beside its ``scope_stats/`` folder
(:func:`run_folder_logs`); a file's metadata line (:func:`read_meta`) is read for the capacity check of
:mod:`.pairing`.
"""

from __future__ import annotations

import glob
import zlib
from collections.abc import Sequence
from pathlib import Path

import zstandard

from ringtrace.files import open_input
from ringtrace.gather.pairing import run_root
from ringtrace.model.records import HostLog, Meta, utf8
from ringtrace.sources.paths import DIR_NAME, LOG_SUFFIX
from ringtrace.stages.decode import Decoder

MAX_META_LINE = 1 << 20
"""A metadata line is a few hundred bytes; a longer first line is not read for the capacity check."""


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
