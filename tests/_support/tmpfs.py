"""A small real tmpfs, for full-disk tests: ``with small_tmpfs(dir, "64k") as mnt: ...``.

Mounting needs root (CI runs as root); elsewhere the test is skipped with the reason, and in CI
(``CI=true``) it fails instead (:func:`tests._support.require.require`), so a full-disk test is never
skipped silently.  :func:`fill` leaves about ``free`` bytes free on it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests._support.require import require


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "64k") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    require(os.geteuid() == 0 and shutil.which("mount") is not None, "mounting a tmpfs needs root and mount(8)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(path)],
                       capture_output=True, text=True, timeout=30, check=False)
    require(r.returncode == 0, f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30, check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(mount: Path, free: int = 0) -> Path:
    """Write a filler file until about ``free`` bytes (rounded to pages) are left; returns it."""
    filler = mount / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while free_bytes(mount) > free:
                fh.write(b"\0" * min(4096, max(1, free_bytes(mount) - free)))
        except OSError:
            pass
    return filler
