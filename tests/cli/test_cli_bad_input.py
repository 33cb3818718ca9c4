"""Hostile input through the real command (a child process): never a traceback, and ``check``
never says ``ok`` for a file it could not assess.

The file used holds a heap at 99.6% of capacity and ``"fatal": true``: readable, ``check``
fails it (exit 1); with its metadata line unreadable, ``check`` says UNREADABLE and exits 2.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._support.scope_stats import encode_lines, meta, rec

DEEP = b"[" * 1000 + b"]" * 1000


def _records() -> list[dict[str, Any]]:
    return [rec("big.cpp:1", "begin", 1, heap=(0, 0)), rec("big.cpp:1", "end", 1, heap=(0, 996))]


def _write(tmp_path: Path, first: bytes | dict[str, Any], *more: bytes | dict[str, Any]) -> Path:
    path = tmp_path / "run" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines([first, *(more or _records())]))
    return path


def _run(*argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringtrace", *map(str, argv)], capture_output=True, text=True,
                          timeout=60, check=False)


GOOD_META = meta(fatal=True, total=2, heap=1000)


def test_the_readable_file_fails_check(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD_META)
    r = _run("check", path)
    assert r.returncode == 1 and f"FAIL {path}" in r.stdout and '"fatal": true' in r.stdout


UNREADABLE_META: dict[str, bytes] = {
    "version-string": json.dumps({**GOOD_META, "version": "6"}).encode(),
    "null-fatal": json.dumps({**GOOD_META, "fatal": None}).encode(),
    "null-total": json.dumps({**GOOD_META, "total": None}).encode(),
    "negative-dropped": json.dumps({**GOOD_META, "dropped": -1}).encode(),
    "nan-total": json.dumps(GOOD_META).encode().replace(b'"total": 2', b'"total": NaN'),
    "deep": json.dumps(GOOD_META).encode()[:-1] + b', "x": ' + DEEP + b"}",
    "no-metadata": json.dumps(_records()[0]).encode(),
}


@pytest.mark.parametrize("first", UNREADABLE_META.values(), ids=UNREADABLE_META.keys())
def test_check_exits_2_and_never_says_ok_when_the_metadata_cannot_be_read(tmp_path: Path, first: bytes) -> None:
    path = _write(tmp_path, first)
    r = _run("check", path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"UNREADABLE {path}" in r.stdout and f"ok {path}" not in r.stdout
    assert "not assessed" in r.stdout
    assert f"{path}:1: error: " in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("first", UNREADABLE_META.values(), ids=UNREADABLE_META.keys())
def test_summary_reports_an_unreadable_metadata_line_and_the_records(tmp_path: Path, first: bytes) -> None:
    path = _write(tmp_path, first)
    r = _run("summary", "--format", "json", path)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert f"{path}:1: error: " in r.stderr
    f = json.loads(r.stdout)["files"][0]
    assert (f["version"], f["parse_errors"], f["scopes"]) == (None, 1, 1)


def test_a_bom_is_tolerated_and_the_file_is_still_gated(tmp_path: Path) -> None:
    path = _write(tmp_path, b"\xef\xbb\xbf" + json.dumps(GOOD_META).encode())
    r = _run("check", path)
    assert r.returncode == 1 and f"FAIL {path}" in r.stdout and '"fatal": true' in r.stdout
    assert f"{path}:1: warning: UTF-8 byte order mark" in r.stderr


def test_deeply_nested_record_is_a_reported_line_in_summary_and_check(tmp_path: Path) -> None:
    deep = b'{"site": "a", "phase": "begin", "depth": 1, "x": ' + DEEP + b"}"
    path = _write(tmp_path, GOOD_META, _records()[0], deep, _records()[1])
    r = _run("summary", "--format", "json", path)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert f"{path}:3: error: JSON nested too deeply" in r.stderr
    f = json.loads(r.stdout)["files"][0]
    assert (f["parse_errors"], f["scopes"], f["records"]) == (1, 1, 2)
    r = _run("check", path)
    assert r.returncode == 1 and f"FAIL {path}" in r.stdout


def test_watch_reads_past_a_deeply_nested_line_and_emits_every_file(tmp_path: Path) -> None:
    deep = b'{"site": "a", "phase": "begin", "depth": 1, "x": ' + DEEP + b"}"
    bad = _write(tmp_path / "a", GOOD_META, _records()[0], deep, _records()[1])
    worse = _write(tmp_path / "b", b'{"version": 6, "x": ' + DEEP + b"}")
    good = _write(tmp_path / "c", GOOD_META)
    r = _run("watch", "--once", tmp_path, "--events", "-")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    lines = {x["path"]: x for x in map(json.loads, r.stdout.splitlines())}
    assert set(lines) == {str(bad), str(worse), str(good)}
    assert (lines[str(bad)]["parse_errors"], lines[str(bad)]["scopes"]) == (1, 1)
    w = lines[str(worse)]
    assert (w["parse_errors"], w["version"], w["scopes"]) == (1, None, 1)
    assert (lines[str(good)]["parse_errors"], lines[str(good)]["fatal"]) == (0, True)


@pytest.mark.parametrize("command", ["summary", "check"])
def test_a_binary_file_given_as_path_is_one_line_and_exit_2(tmp_path: Path, command: str) -> None:
    path = tmp_path / "core.dump"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 300)  # no newline for 76 KiB
    r = _run(command, path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr == (f"ringtrace: {path}: not a scope_stats file (its first line is not a JSON object) "
                        "and not a host log\n")
    assert f"ok {path}" not in r.stdout and "parse error" not in r.stderr
