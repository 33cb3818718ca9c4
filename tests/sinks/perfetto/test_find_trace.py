"""``find_trace`` and ``find_page``: the file a run's labels name in an output directory (the alerts' links)."""

from __future__ import annotations

import os
from pathlib import Path

from ringtrace.files import path_hash
from ringtrace.model.records import Labels, Source
from ringtrace.report import find_page, page_stem
from ringtrace.sinks.perfetto import find_trace, trace_file_name

L = Labels("run_a", "3", "1")


def put(d: Path, name: str, mtime: int) -> Path:
    p = d / name
    p.write_bytes(name.encode())
    os.utime(p, ns=(mtime, mtime))  # the clock is the test's
    return p


def test_the_newest_trace_of_the_labels_of_every_generation_and_path_is_found(tmp_path: Path) -> None:
    old = put(tmp_path, trace_file_name(Source("/a/x.jsonl", L)), 10)
    gen = put(tmp_path, trace_file_name(Source("/a/x.jsonl", L, generation=2)), 30)
    other_root = put(tmp_path, trace_file_name(Source("/b/x.jsonl", L)), 20)
    put(tmp_path, trace_file_name(Source("/a/y.jsonl", Labels("run_a", "3", "10"))), 99)  # d10, not d1
    put(tmp_path, trace_file_name(Source("/a/z.jsonl", Labels("run_a", "3", ""))), 98)
    put(tmp_path, trace_file_name(Source("/a/x.jsonl", L)) + ".tmp", 97)  # still being written
    assert find_trace(tmp_path, L) == gen
    os.utime(other_root, ns=(40, 40))
    assert find_trace(tmp_path, L) == other_root
    gen.unlink()
    other_root.unlink()
    assert find_trace(tmp_path, L) == old
    assert find_trace(tmp_path, Labels("run_a", "3", "")) == tmp_path / trace_file_name(Source("/a/z.jsonl",
                                                                                              Labels("run_a", "3")))
    assert find_trace(tmp_path, Labels("run_b", "3", "1")) is None
    assert find_trace(tmp_path / "absent", L) is None


def test_a_long_run_name_is_found_by_the_end_the_file_name_keeps(tmp_path: Path) -> None:
    long = Labels("r" * 300, "0", "0")
    want = put(tmp_path, trace_file_name(Source("/x.jsonl", long, generation=7)), 1)
    assert find_trace(tmp_path, long) == want


def test_no_file_outside_the_directory_and_no_symlink(tmp_path: Path) -> None:
    d = tmp_path / "traces"
    d.mkdir()
    outside = put(tmp_path, trace_file_name(Source("/x.jsonl", L)), 1)
    (d / outside.name).symlink_to(outside)
    assert find_trace(d, L) is None
    for label in ("..", "../traces", "/etc/passwd", ""):
        assert find_trace(d, Labels(label, "3", "1")) is None


def test_the_newest_page_of_the_labels_is_found(tmp_path: Path) -> None:
    a = put(tmp_path, f"{page_stem(L)}-{path_hash('/a/x.jsonl')}.html", 10)
    b = put(tmp_path, f"{page_stem(L)}-{path_hash('/b/x.jsonl')}.html", 20)
    put(tmp_path, f"{page_stem(Labels('run_a', '3', '10'))}-{path_hash('/c')}.html", 30)
    assert find_page(tmp_path, L) == b
    b.unlink()
    assert find_page(tmp_path, L) == a
    assert find_page(tmp_path, Labels("run_a", "3", "")) is None
    assert find_page(tmp_path / "absent", L) is None
