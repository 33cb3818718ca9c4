"""The one atomic write, the one file-name hash and the one input opener (:mod:`ringtrace.files`)."""

from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path

import pytest
import zstandard

from ringtrace.files import open_input, path_hash, write_atomic, write_atomic_fd


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    target.write_text("old")
    write_atomic(target, b"new")
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["page.html"]
    write_atomic(target, b"private", mode=0o600)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_write_atomic_fd_keeps_the_new_file_open_at_its_end(tmp_path: Path) -> None:
    target = tmp_path / "keys"
    fd = write_atomic_fd(target, b"a\n", mode=0o644)
    try:
        os.write(fd, b"b\n")
    finally:
        os.close(fd)
    assert target.read_bytes() == b"a\nb\n"


def test_a_failed_write_leaves_the_target_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "x"
    with pytest.raises(OSError):
        write_atomic(target, b"x")
    assert not (tmp_path / "missing").exists()


def test_path_hash_is_eight_hex_digits_per_path() -> None:
    assert path_hash("/a/scope_stats.jsonl") != path_hash("/b/scope_stats.jsonl")
    assert len(path_hash("/a")) == 8 and int(path_hash("/a"), 16) >= 0


@pytest.mark.parametrize("kind", ["plain", "gzip", "zstd"])
def test_open_input_reads_plain_gzip_and_zstd_alike(tmp_path: Path, kind: str) -> None:
    data = b'{"version": 6}\n' * 100
    packed = {"plain": data, "gzip": gzip.compress(data), "zstd": zstandard.ZstdCompressor().compress(data)}[kind]
    path = tmp_path / "scope_stats.jsonl"
    path.write_bytes(packed)
    with open_input(path) as fh:
        assert fh.read() == data
