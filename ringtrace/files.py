"""Files ringtrace writes and opens, each way written once: the one room every other may use (sources, the
reading, sinks and the report).

* :func:`write_atomic`: write to a temporary file beside the target, then rename it into place, so a
  reader (or a crash) never sees half a file: the state file, the events file's key index, the HTML
  report and each report-dir page.  (The Perfetto writer streams into ``<file>.tmp`` over a run's life
  and renames it with :func:`replace_into`.)
* :func:`path_hash`: the 8 hex digits that tell apart output files of runs labelled alike (the
  Perfetto dir sink's and the report dir sink's file names).
* :func:`newest`: the newest file of a directory whose name is wanted (the metrics server's report and
  trace links: several pages or traces may carry a run's labels).
* :func:`open_input`: an input file for reading, decompressed when it is gzip or zstd (told by its
  first bytes): scope_stats files and the first lines the host-log plan checks.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import zstandard

_GZIP, _ZSTD = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"


def write_atomic(target: Path | str, data: bytes, mode: int | None = None) -> None:
    """``data`` into ``target`` through a temporary file in its directory (``.<name>.<random>.tmp``) and a
    rename.  ``mode``: the file's permissions (default: what ``open`` would give, 0o666 less the umask; the
    state file passes 0o600).  Raises OSError (the temporary file is removed)."""
    os.close(write_atomic_fd(target, data, mode))


def write_atomic_fd(target: Path | str, data: bytes, mode: int | None = None) -> int:
    """:func:`write_atomic`, keeping the new file open: its descriptor, at its end (the events file's key
    index goes on appending to the file it compacted)."""
    import tempfile  # only where files are written: summary and check import none of it

    target = Path(target)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _default_mode() if mode is None else mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.replace(tmp, target)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd


def replace_into(tmp: Path | str, target: Path | str) -> None:
    """The last step of a streamed write: rename the finished temporary file ``tmp`` over ``target``."""
    os.replace(tmp, target)


_UMASK: int | None = None


def _default_mode() -> int:
    global _UMASK
    if _UMASK is None:  # read once: os.umask can only be read by setting it
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return 0o666 & ~_UMASK


def path_hash(path: str) -> str:
    """8 hex digits of ``path`` (blake2s): unique enough per source file within one output directory."""
    import hashlib  # only where output files are named

    return hashlib.blake2s(os.fsencode(path), digest_size=4).hexdigest()


def newest(directory: Path | str, wanted: Callable[[str], bool]) -> Path | None:
    """The regular file (not a symlink) directly in ``directory`` whose name ``wanted`` accepts and that
    was modified last (on a tie, the greatest name); None when there is none or no such directory.

    Only names listed in ``directory`` are returned: nothing outside it, whatever ``wanted`` accepts."""
    best: tuple[int, str, str] | None = None
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not wanted(entry.name):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    key = (entry.stat(follow_symlinks=False).st_mtime_ns, entry.name, entry.path)
                except OSError:  # removed or replaced meanwhile
                    continue
                if best is None or key > best:
                    best = key
    except OSError:
        return None
    return Path(best[2]) if best is not None else None


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


@contextmanager
def open_input(path: Path | str) -> Iterator[Readable]:
    """``path`` for reading, decompressed when it is gzip or zstd (told by its first bytes, whatever its
    name: the runtime's files are often compressed when kept).  Raises OSError."""
    with Path(path).open("rb") as raw:
        magic = raw.read(4)
        raw.seek(0)
        if magic.startswith(_GZIP):
            with gzip.GzipFile(fileobj=raw) as gz:
                yield gz
        elif magic == _ZSTD:
            with zstandard.ZstdDecompressor().stream_reader(raw) as zs:
                yield zs
        else:
            yield raw
