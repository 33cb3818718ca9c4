"""Which files to follow: roots (files, directories, glob patterns) -> files and watch points.

Directories are searched recursively for the runtime's layouts (``layout.is_scope_stats``);
a glob pattern is matched against whole paths (``*`` and ``?`` within one path component,
``**`` across components); a file named directly is followed whatever its name.  Roots that
do not exist yet are reported and looked for again at every rescan.

Searching never follows a symbolic link below a root (a link to a directory above would loop,
``latest -> run_x`` would report every run twice), and a directory that cannot be read is
reported once through ``onerror`` and skipped: the rest of the tree is still searched.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

from ringtrace.sources.paths import is_scope_stats, walk_files

_GLOB_CHARS = "*?["

OnError = Callable[[OSError], None]


def walk_errors(log: logging.Logger) -> OnError:
    """An ``onerror`` that logs each unreadable directory once per process."""
    seen: set[str] = set()

    def onerror(err: OSError) -> None:
        where = str(err.filename)
        if where not in seen:
            seen.add(where)
            log.warning("%s: cannot search: %s (skipped; the rest of the tree is followed)", where,
                        err.strerror or err)

    return onerror


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled regex for an absolute glob ``pattern`` (``**`` spans directories)."""
    out: list[str] = []
    parts = pattern.split("/")
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]*/)*")
            continue
        j = 0
        seg: list[str] = []
        while j < len(part):
            c = part[j]
            if c == "*":
                seg.append("[^/]*")
            elif c == "?":
                seg.append("[^/]")
            elif c == "[" and (end := part.find("]", j + 2)) != -1:
                body = part[j + 1:end]
                seg.append("[" + ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\") + "]")
                j = end
            else:
                seg.append(re.escape(c))
            j += 1
        out.append("".join(seg) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


class Root:
    """One user-given root.  ``watch_dir`` is what the file-system watcher should watch."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.is_glob = any(c in text for c in _GLOB_CHARS)
        if self.is_glob:
            parts = Path(text).parts
            static = list(parts[: next(i for i, p in enumerate(parts) if any(c in p for c in _GLOB_CHARS))])
            self.base = Path(*static) if static else Path(".")
            self.regex: re.Pattern[str] | None = glob_regex(os.path.abspath(text))
        else:
            self.base = Path(text)
            self.regex = None
        self.abs_base = self.base.absolute()

    @property
    def exists(self) -> bool:
        return self.base.exists()

    @property
    def watch_dir(self) -> tuple[Path, bool] | None:
        """(directory, recursive) to watch, or None while the root does not exist."""
        if self.is_glob or self.base.is_dir():
            return (self.base, True) if self.base.is_dir() else None
        if self.base.parent.is_dir():
            return (self.base.parent, False)
        return None

    def matches(self, path: Path) -> bool:
        """Whether a file at ``path`` (absolute) belongs to this root (no symbolic link on the way)."""
        if self.regex is not None:
            return self.regex.match(str(path)) is not None and not self._through_link(path)
        base = self.abs_base
        if path == base:
            return True
        return is_scope_stats(path) and base in path.parents and not self._through_link(path)

    def _through_link(self, path: Path) -> bool:
        """A directory between the root's base and ``path`` (or the file itself) is a symbolic link."""
        base = self.abs_base
        p = path
        while p != base and p != p.parent:
            if p.is_symlink():
                return True
            p = p.parent
        return False

    def scan(self, onerror: OnError | None = None, keep: Callable[[Path], bool] | None = None) -> list[Path]:
        """The matching files that exist now (absolute paths, sorted); ``keep`` replaces the root's own match."""
        return self.scan_also(onerror, keep)[0]

    def scan_also(self, onerror: OnError | None = None, keep: Callable[[Path], bool] | None = None,
                  also: Callable[[Path], bool] | None = None) -> tuple[list[Path], list[Path]]:
        """As :meth:`scan`, and in the same walk the other files ``also`` accepts (host logs), apart.
        A root naming a file directly has nothing else."""
        if not self.is_glob and self.base.is_file():
            return [self.abs_base], []
        found: list[Path] = []
        other: list[Path] = []
        regex = self.regex
        for p in walk_files(self.abs_base, onerror, special=True):  # the one walk and symlink policy of every command
            if keep is not None:
                ok = keep(p)
            elif regex is not None:
                ok = regex.match(str(p)) is not None
            else:
                ok = is_scope_stats(p)
            if ok:
                found.append(p)
            elif also is not None and also(p):
                other.append(p)
        return sorted(found), sorted(other)
