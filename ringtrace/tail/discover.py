"""Which files to follow: roots (files, directories, glob patterns) -> files and watch points.

Directories are searched recursively for the runtime's layouts (``layout.is_scope_stats``);
a glob pattern is matched against whole paths; a file named directly is followed whatever
its name.  Roots that do not exist yet are reported and looked for again at every rescan.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from pathlib import Path

from ringtrace.layout import is_scope_stats

_GLOB_CHARS = "*?["


class Root:
    """One user-given root.  ``watch_dir`` is what the file-system watcher should watch."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.is_glob = any(c in text for c in _GLOB_CHARS)
        if self.is_glob:
            parts = Path(text).parts
            static = [p for p in parts[: next(i for i, p in enumerate(parts) if any(c in p for c in _GLOB_CHARS))]]
            self.base = Path(*static) if static else Path(".")
            self.pattern = os.path.abspath(text)
        else:
            self.base = Path(text)
            self.pattern = ""

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
        """Whether a file at ``path`` (absolute) belongs to this root."""
        if self.is_glob:
            return fnmatch.fnmatch(str(path), self.pattern)
        base = self.base.absolute()
        if path == base:
            return True
        return is_scope_stats(path) and base in path.parents

    def scan(self) -> list[Path]:
        """The matching files that exist now."""
        if self.is_glob:
            return [Path(p) for p in sorted(glob.glob(self.text, recursive=True)) if os.path.isfile(p)]
        if self.base.is_file():
            return [self.base]
        if self.base.is_dir():
            found: list[Path] = []
            for dirpath, _dirs, names in os.walk(self.base):
                for name in names:
                    p = Path(dirpath, name)
                    if is_scope_stats(p):
                        found.append(p)
            return sorted(found)
        return []
