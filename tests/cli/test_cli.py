"""``ringtrace summary`` and ``ringtrace check`` end to end: bad input, JSON shape, exit codes.

Exit codes (cli.py docstring): 0 read (possibly with problems, reported on stderr), 1 ``check``
failed (ring over the limit, wedged, fatal), 2 unreadable input.  Every bad-input case asserts the
message names the file and line, the line is counted in ``parse_errors``, and a valid scope after
it is still paired.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main
from ringtrace.stages.decode import MAX_LINE
from tests._support.cli import Result
from tests._support.samples import BGEMM, FLOW, SAMPLES
from tests._support.scope_stats import Line, WriteJsonl, encode_lines, meta, rec

DEFAULT = SAMPLES / "outputs/TestScopeStats_default_20261130_101210"

FILE_KEYS = {"path", "version", "fatal", "dropped", "total", "records", "complete", "scopes", "unmatched_begins",
             "unmatched_ends", "parse_errors", "rings", "tensormap", "wedged", "findings", "labels"}
RING_KEYS = {"ring", "resource", "capacity", "high_water", "high_water_site", "high_water_ratio", "live_at_exit",
             "alloc"}


# -- summary --format json ---------------------------------------------------------------------


def test_json_is_one_object_with_the_issue_keys(cli: Any) -> None:
    r = cli("summary", "--format", "json", SAMPLES)
    assert r.code == 0 and r.err == ""
    doc = r.json  # the whole stdout is one JSON document
    assert list(doc) == ["files"] and len(doc["files"]) == 10  # 8 files, 2 runs known from their host.log alone
    assert [f["labels"]["run"] for f in doc["files"] if f["path"] is None] == ["VectorExample_dep_pool4",
                                                                             "VectorExample_heap128k_abort"]
    for f in doc["files"]:
        assert set(f) >= FILE_KEYS
        assert set(f["labels"]) >= {"run", "rank", "dispatch"}
        assert set(f["tensormap"]) >= {"capacity", "peak", "peak_site"}
        for ring in f["rings"]:
            assert set(ring) >= RING_KEYS
        for w in f["wedged"]:
            assert set(w) == {"site", "depth", "ring", "line"}
        for finding in f["findings"]:
            assert set(finding) >= {"rule", "severity", "message"}


def test_json_rings_only_for_rings_with_a_paired_scope(cli: Any) -> None:
    f = cli("summary", "--format", "json", FLOW).file()
    assert f["rings"] == [] and len(f["wedged"]) == 5
    f = cli("summary", "--format", "json", BGEMM).file()
    assert sorted({r["ring"] for r in f["rings"]}) == [0, 1]


def test_json_ratio_is_null_without_capacity(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"version": 6, "fatal": False, "dropped": 0, "total": 2}, rec("a", "begin", 1),
                        rec("a", "end", 1, tw=(0, 2))])
    f = cli("summary", "--format", "json", path).file()
    assert {r["high_water_ratio"] for r in f["rings"]} == {None}
    assert {r["capacity"] for r in f["rings"]} == {None}


def test_table_names_file_rings_and_findings(cli: Any) -> None:
    r = cli("summary", FLOW)
    assert r.code == 0
    assert str(FLOW) in r.out and "wedged scopes" in r.out and "line 6: nested_dummy_small_orch.cpp:75" in r.out
    assert "FLOW_CONTROL_DEADLOCK" in r.out


# -- bad input, one case each ------------------------------------------------------------------


def good_after(line: int) -> list[dict[str, Any]]:
    """A valid scope after the bad line (ring 1, counters above anything before)."""
    del line
    return [rec("after.cpp:1", "begin", 1, tw=(100, 100), heap=(10**6, 10**6), dp=(100, 100)),
            rec("after.cpp:1", "end", 1, tw=(100, 103), heap=(10**6, 10**6 + 64), dp=(100, 101))]


def _bad_file(write_jsonl: WriteJsonl, bad: Line, **kw: Any) -> Path:
    return write_jsonl([meta(total=3), rec("(unknown):0", "begin", 0), bad, *good_after(3),
                        rec("(unknown):0", "end", 0)], **kw)


def _assert_line_problem(r: Result, path: Path, line: int, text: str) -> None:
    assert r.code == 0, r.err
    assert f"{path}:{line}: error: " in r.err and text in r.err, r.err
    f = r.file()
    assert f["parse_errors"] == 1
    assert f["scopes"] == 2  # the root and after.cpp:1 still paired
    assert any(x["high_water_site"] == "after.cpp:1" for x in f["rings"])
    assert [(p["line"], p["severity"]) for p in f["problems"]] == [(line, "error")]


BAD_LINES: list[tuple[str, Line, str]] = [
    ("unescaped-quote-unrepairable", b'{"site": "my"file.cpp:3", "phase": "begin", "depth": 1, "ring": 1, oops}',
     "invalid JSON"),
    ("binary-garbage", b"\x89PNG\x00\x01\xff\xfe\xfd garbage \x00", "invalid JSON"),
    ("missing-field", {k: v for k, v in rec("m", "begin", 1).items() if k != "task_window_end"},
     "task_window_end"),
    ("non-integer-field", rec("m", "begin", 1, heap_end="12"), "Expected `int`, got `str` - at `$.heap_end`"),
    ("float-field", rec("m", "begin", 1, tensormap=1.5), "$.tensormap"),
    ("ring-outside-metadata", rec("m", "begin", 1, ring=4), "ring 4 outside the metadata's rings 0..3"),
    ("depth-over-64", rec("m", "begin", 65, ring=3), "depth 65 outside 0..64"),
    ("counter-backwards", rec("m", "begin", 0, ring=0, tw=(0, 0), heap=(0, 0), dp=(0, 0)),
     "dep_pool_start went backwards on ring 0: 0 after 1"),
    ("first-line-again", meta(), "second metadata line"),
]


@pytest.mark.parametrize(("bad", "text"), [(b, t) for _, b, t in BAD_LINES], ids=[i for i, _, _ in BAD_LINES])
def test_bad_line_is_reported_with_file_and_line_and_the_rest_is_read(cli: Any, write_jsonl: WriteJsonl, bad: Line,
                                                                      text: str) -> None:
    path = _bad_file(write_jsonl, bad)
    r = cli("summary", "--format", "json", path)
    _assert_line_problem(r, path, 3, text)


def test_unescaped_quote_in_site_is_repaired(cli: Any, write_jsonl: WriteJsonl) -> None:
    """The runtime really writes ``{"site": "my"file.cpp:3", ...}``: read it, warn once."""
    begin = json.dumps(rec("X", "begin", 1)).replace('"X"', '"my"file.cpp:3"')
    end = json.dumps(rec("X", "end", 1, tw=(0, 2))).replace('"X"', '"my"file.cpp:3"')
    path = write_jsonl([meta(total=4), rec("(unknown):0", "begin", 0), begin, end, rec("(unknown):0", "end", 0)])
    r = cli("summary", "--format", "json", path)
    assert r.code == 0
    assert f"{path}:3: warning: site is not valid JSON" in r.err
    f = r.file()
    assert (f["parse_errors"], f["scopes"], f["complete"]) == (0, 2, True)
    assert any(x["high_water_site"] == 'my"file.cpp:3' for x in f["rings"])


def test_line_over_1mib(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = _bad_file(write_jsonl, rec("x" * MAX_LINE, "begin", 1))
    r = cli("summary", "--format", "json", path)
    _assert_line_problem(r, path, 3, f"line longer than {MAX_LINE} bytes")


def test_crlf_endings(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([meta(total=4), rec("(unknown):0", "begin", 0), *good_after(3), rec("(unknown):0", "end", 0)],
                       newline=b"\r\n")
    r = cli("summary", "--format", "json", path)
    assert r.code == 0 and f"{path}:1: warning: CRLF line endings" in r.err
    f = r.file()
    assert (f["parse_errors"], f["scopes"], f["complete"]) == (0, 2, True)


def test_missing_path(cli: Any, tmp_path: Path) -> None:
    r = cli("summary", "--format", "json", tmp_path / "nope.jsonl", BGEMM)
    assert r.code == 2
    assert f"{tmp_path / 'nope.jsonl'}: no such file or directory" in r.err
    assert len(r.json["files"]) == 1  # the readable input is still reported


def test_directory_without_scope_stats_files(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "other.jsonl").write_text("{}\n")
    r = cli("summary", tmp_path)
    assert r.code == 2 and f"{tmp_path}: no scope_stats files in this directory" in r.err
    assert "and no host log (*.log)" in r.err


def test_empty_file(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([])
    r = cli("summary", "--format", "json", path)
    assert r.code == 2
    assert f"{path}: error: empty file" in r.err
    assert r.file()["parse_errors"] == 1 and r.file()["version"] is None


def test_metadata_only(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([meta(total=0)])
    r = cli("summary", "--format", "json", path)
    assert r.code == 0 and f"{path}: warning: metadata line only" in r.err
    f = r.file()
    assert (f["records"], f["scopes"], f["complete"], f["parse_errors"]) == (0, 0, True, 0)


def test_first_line_not_metadata(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([rec("(unknown):0", "begin", 0), *good_after(2), rec("(unknown):0", "end", 0)])
    r = cli("summary", "--format", "json", path)
    assert r.code == 0
    assert f"{path}:1: error: first line is not the metadata line" in r.err
    f = r.file()
    assert (f["version"], f["parse_errors"], f["scopes"], f["records"], f["complete"]) == (None, 1, 2, 4, False)


def test_whole_file_of_garbage_is_unreadable(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([b"\x7fELF\x02\x01\x01\x00\x00\x00", b"\x00\x00\xff" * 50])
    r = cli("summary", "--format", "json", path)
    assert r.code == 2
    # one line naming the file and what it is, not an error per line
    assert r.err.strip().splitlines() == [f"ringtrace: {path}:1: error: not a scope_stats file: its first line is "
                                          "binary data, not JSON"]
    assert r.file()["parse_errors"] == 1
    table = cli("summary", path)
    assert table.code == 2 and table.out.strip() == ""  # nothing repeated on stdout


@pytest.mark.parametrize(("first", "second", "what"), [
    (b'{"version": "x", "foo": 1}', b"", 'its first line\'s "version" is not an integer'),
    (b"[1, 2, 3]", b"", "its first line is not a JSON object"),
    (b'{"name": "something else"}', b'{"another": "object"}', 'its first line has no "version"'),
    (b"hello world", b"more text", "its first line is not JSON"),
])
def test_a_file_of_something_else_says_what_it_is(cli: Any, write_jsonl: WriteJsonl, first: bytes, second: bytes,
                                                   what: str) -> None:
    path = write_jsonl([first, second] if second else [first])
    r = cli("summary", path)
    assert r.code == 2 and r.out.strip() == ""
    assert r.err.strip().splitlines() == [f"ringtrace: {path}:1: error: not a scope_stats file: {what}"]


def test_a_bad_metadata_line_before_records_is_still_one_error_and_the_records_count(
        cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([b"{garbage", *good_after(1)])
    r = cli("summary", "--format", "json", path)
    assert f"{path}:1: error: metadata line: invalid JSON" in r.err
    assert r.file()["parse_errors"] == 1 and r.file()["records"] == len(good_after(1))


def test_compressed_files_are_read_transparently(cli: Any, write_jsonl: WriteJsonl, tmp_path: Path) -> None:
    import gzip

    import zstandard

    plain = Path(write_jsonl([meta(total=2), *good_after(2)]))
    data = plain.read_bytes()
    gz = tmp_path / "kept" / "run_gz" / "scope_stats" / "scope_stats.jsonl.gz"
    zst = tmp_path / "kept" / "run_zst" / "scope_stats" / "scope_stats.jsonl.zst"
    for p, body in ((gz, gzip.compress(data)), (zst, zstandard.ZstdCompressor().compress(data))):
        p.parent.mkdir(parents=True)
        p.write_bytes(body)
    want = cli("summary", "--format", "json", str(plain)).file()
    for p in (gz, zst):
        got = cli("summary", "--format", "json", str(p)).file()
        assert {k: v for k, v in got.items() if k not in ("path", "labels", "advice")} == \
            {k: v for k, v in want.items() if k not in ("path", "labels", "advice")}
        assert [{k: v for k, v in a.items() if k != "reason"} for a in got["advice"]] == \
            [{k: v for k, v in a.items() if k != "reason"} for a in want["advice"]]  # reasons name the run
    both = cli("summary", "--format", "json", str(tmp_path / "kept"))  # found by a directory walk too
    assert both.code == 0 and len(json.loads(both.out)["files"]) == 2
    cut = tmp_path / "cut" / "scope_stats" / "scope_stats.jsonl.gz"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(gzip.compress(data)[:40])
    r = cli("summary", str(cut))
    assert r.code == 2 and f"{cut}: cannot read: " in r.err


def test_unsupported_old_version_is_unreadable(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([{"version": 3, "fatal": False, "dropped": 0, "total": 0}])
    r = cli("summary", path)
    assert r.code == 2 and f"{path}:1: error: schema version 3 is not supported" in r.err


def test_many_bad_lines_are_summarised(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([meta(total=2), *(["garbage"] * 150), *good_after(152)])
    r = cli("summary", "--format", "json", path)
    assert r.code == 0
    assert r.err.count(f"{path}:") == 20 + 1  # 20 shown, then one line for the rest
    assert f"{path}: 130 more parse error(s) not shown" in r.err
    assert r.file()["parse_errors"] == 150 and r.file()["scopes"] == 1


def test_no_traceback_in_a_subprocess(tmp_path: Path) -> None:
    """Every bad input at once, through the real entry point: messages, exit 2, never a traceback."""
    files = []
    for i, (_, bad, _) in enumerate(BAD_LINES):
        p = tmp_path / f"bad{i}.jsonl"
        p.write_bytes(encode_lines([meta(total=3), rec("(unknown):0", "begin", 0), bad, *good_after(3)]))
        files.append(str(p))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "garbage.jsonl").write_bytes(bytes(range(256)) * 64)
    (tmp_path / "crlf.jsonl").write_bytes(encode_lines([meta(), *good_after(2)], newline=b"\r\n"))
    files += [str(tmp_path / n) for n in ("empty.jsonl", "garbage.jsonl", "crlf.jsonl", "missing.jsonl")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RINGTRACE_")}
    for args in (["summary", "--format", "json"], ["summary"], ["check"]):
        proc = subprocess.run([sys.executable, "-m", "ringtrace", *args, *files], capture_output=True, text=True,
                              timeout=120, env=env, check=False)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
        assert "missing.jsonl: no such file or directory" in proc.stderr
        for i in range(len(BAD_LINES)):
            assert f"bad{i}.jsonl:3: error: " in proc.stderr
        if "json" in args:
            doc = json.loads(proc.stdout)
            assert len(doc["files"]) == len(files) - 1


# -- check -------------------------------------------------------------------------------------


def test_check_passes_a_healthy_run(cli: Any) -> None:
    r = cli("check", DEFAULT)
    assert r.code == 0 and r.out.startswith("ok ")


def test_check_fails_over_a_given_limit_on_a_proven_need(cli: Any) -> None:
    """``--max-ratio`` limits a need the records prove (never occupancy): bgemm's scope holds 512 KiB of its
    256 MiB ring (0.2%) and 4 tasks (a need of 5 of 16384 slots)."""
    assert cli("check", BGEMM).code == 0  # no limit given: a completed run passes
    r = cli("check", "--max-ratio", "0.001", BGEMM)
    assert r.code == 1 and f"FAIL {BGEMM}" in r.out
    assert "ring 1 heap: a proven need of 512.0 KiB is 0.2% of capacity (limit 0%)" in r.out
    assert "task_window" not in r.out  # 5 of 16384


def test_check_resource_selects_what_is_gated(cli: Any) -> None:
    assert cli("check", "--max-ratio", "0.001", "--resource", "task_window", BGEMM).code == 0
    assert cli("check", "--max-ratio", "0.001", "--resource", "task_window", "--resource", "heap", BGEMM).code == 1
    # the dep pool's count is timing, not a proof: no limit on it can fail a run
    assert cli("check", "--max-ratio", "0.001", "--resource", "dep_pool", BGEMM).code == 0


def test_check_fails_a_wedged_run(cli: Any) -> None:
    r = cli("check", FLOW)
    assert r.code == 1
    assert "wedged in nested_dummy_small_orch.cpp:75 (depth 4, ring 3, line 6): FLOW_CONTROL_DEADLOCK" in r.out


def test_check_fails_a_fatal_run(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([meta(fatal=True, total=2), rec("a", "begin", 1), rec("a", "end", 1)])
    r = cli("check", path)
    assert r.code == 1 and '"fatal": true' in r.out


def test_check_unreadable_input_is_2_even_when_another_file_fails(cli: Any, tmp_path: Path) -> None:
    r = cli("check", FLOW, tmp_path / "missing")
    assert r.code == 2 and "FAIL" in r.out and "no such file or directory" in r.err


def test_check_over_several_files_reports_each(cli: Any) -> None:
    r = cli("check", "--max-ratio", "0.001", DEFAULT, BGEMM)
    assert r.code == 1
    lines = r.out.split("\n\n", 1)[1]  # after the overview (whose check column says PASS / FAIL)
    assert lines.count("ok ") == 1 and lines.count("FAIL ") == 1


def test_invalid_setting_is_exit_2(cli: Any) -> None:
    r = cli("check", "--max-ratio", "-1", BGEMM)
    assert r.code == 2 and "max" in r.err


def test_thresholds_are_settable_from_the_command_line(cli: Any) -> None:
    f = cli("summary", "--format", "json", BGEMM).file()
    assert f["findings"] == [] and f["verdict"]["kind"] == "healthy"
    # ring 1 heap: one scope holds 512 KiB of 256 MiB (0.2%); rings 0's heap carries nothing
    f = cli("summary", "--format", "json", "--near", "0.001", BGEMM).file()
    assert [(x["rule"], x["message"][:11]) for x in f["findings"]] == [("near_capacity", "ring 1 heap"),
                                                                        ("near_capacity", "tensormap p"),
                                                                        ("auto_scope_collapse", "ring 1 carr")]
    assert (f["verdict"]["kind"], f["verdict"]["ring"], f["verdict"]["resource"]) == ("near_capacity", 1, "heap")
    f = cli("summary", "--format", "json", "--near", "0.001", "--idle", "0.0001", BGEMM).file()
    assert [x["rule"] for x in f["findings"]] == ["near_capacity", "near_capacity", "auto_scope_collapse"]


@pytest.mark.parametrize("site", ["k[/].cpp:3", "kernel[v2].cpp:3", "[bold red]x.cpp:1"])
def test_table_prints_sites_and_paths_verbatim_never_as_markup(cli: Any, tmp_path: Path, site: str) -> None:
    path = tmp_path / "odd[bold]dir" / "scope_stats.jsonl"
    path.parent.mkdir()
    path.write_bytes(encode_lines([meta(total=2), rec(site, "begin", 1), rec(site, "end", 1, tw=(0, 2))]))
    r = cli("summary", path)
    assert r.code == 0 and "Traceback" not in r.err
    assert str(path) in r.out
    assert r.out.count(site) == 4  # three ring rows and the tensormap row


def test_check_does_not_say_ok_for_an_unreadable_file(cli: Any, write_jsonl: WriteJsonl) -> None:
    path = write_jsonl([])
    r = cli("check", path)
    assert r.code == 2
    assert f"ok {path}" not in r.out


def test_a_reader_that_stops_early_gets_exit_141_and_no_traceback(tmp_path: Path) -> None:
    import shutil

    from tests._support.samples import SAMPLES

    for i in range(30):  # enough table output to overflow the pipe before the reader goes away
        shutil.copytree(SAMPLES / "outputs", tmp_path / f"copy{i}")
    proc = subprocess.Popen([sys.executable, "-m", "ringtrace", "summary", "--details", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # --details: every table
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err


def test_version_and_help_say_what_each_command_does(capsys: pytest.CaptureFixture[str]) -> None:
    from ringtrace.cli import HELP

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("ringtrace ")
    for name, (description, examples, codes) in HELP.items():
        with pytest.raises(SystemExit):
            main([name, "--help"])
        text = capsys.readouterr().out
        assert description in text and all(e in text for e in examples) and f"exit codes: {codes}" in text
        own, shared = text.index("options:"), text.index("shared options:")
        assert own < shared, name  # the command's own flags first


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_overview_fits_the_terminal_and_leads_with_the_failure(width: int) -> None:
    samples = Path(__file__).parents[1] / "fixtures" / "samples"
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "summary", str(samples)], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": str(width)}, timeout=120)
    lines = proc.stdout.splitlines()
    paths = {line for line in lines if line.startswith(("tests/", "/", "(no scope_stats file"))}
    assert all(len(line.rstrip()) <= width for line in lines if line not in paths), width  # only paths run on
    overview = proc.stdout.split("\n\n", 1)[0]
    # cells wrap between words, never inside a word, a name or a number: every word of a verdict is whole
    for name in ("HEAP_RING_DEADLOCK", "FLOW_CONTROL_DEADLOCK", "DEP_POOL_OVERFLOW", "task_window,",
                 "nested_dummy_small_orch.cpp:75,", "HeapRingDeadlock", "VectorExample_heap128k_abort"):
        assert name in overview, (name, width)
    head = overview.splitlines()[1].split()
    if head[0] == "source":  # a table (wide enough), else a block per source
        assert head[:2] == ["source", "verdict"] and "program" not in head  # no empty column
    else:
        assert width < 120 and overview.splitlines()[1] == "HeapRingDeadlock"
    # details in problem order: the wedged and failed runs before the healthy ones
    details = [line for line in lines if line in paths]
    assert "HeapRingDeadlock" in details[0] and all("TestScopeStats_default" not in d for d in details)
    sites = [w for line in lines for w in line.split() if ".cpp:" in w]
    assert sites and all(w.rsplit(":", 1)[1].rstrip("),;.").isdigit() for w in sites)  # a site keeps its line number


def test_check_fails_exactly_the_runs_whose_verdict_is_an_error() -> None:
    """One verdict: ``check`` FAILs a file iff ``summary``'s verdict for it has severity error, on every sample;
    the overview's gate column says the same."""
    samples = Path(__file__).parents[1] / "fixtures" / "samples"
    summary = subprocess.run([sys.executable, "-m", "ringtrace", "summary", "--format", "json", str(samples)],
                             capture_output=True, text=True, timeout=120)
    check = subprocess.run([sys.executable, "-m", "ringtrace", "check", str(samples)], capture_output=True,
                           text=True, timeout=120)
    lines = check.stdout.split("\n\n", 1)[1].splitlines()
    files = json.loads(summary.stdout)["files"]
    assert {f["verdict"]["severity"] for f in files} >= {"ok", "error"}
    for f in files:
        shown = f["path"] or f"(no scope_stats file; host log {f['host_log']['path']})"
        line = next(x for x in lines if x.endswith(shown))
        assert line.startswith("FAIL" if f["verdict"]["severity"] == "error" else "ok"), (line, f["verdict"])
        if f["verdict"]["severity"] == "error":  # the reason, a sentence wrapped at the width (160 to a pipe)
            after = lines[lines.index(line) + 1:]
            said = after[:next((i for i, x in enumerate(after) if not x.startswith("  ")), len(after))]
            assert " ".join(x.strip() for x in said) == f["verdict"]["text"]
    rows = check.stdout.split("\n\n", 1)[0]
    assert "PASS" in rows and "FAIL" in rows


def test_a_taken_metrics_address_names_the_flag(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "ringtrace", "watch", str(tmp_path), "--metrics-addr",
                            f"127.0.0.1:{port}", "--quiet"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(f"ringtrace: --metrics-addr 127.0.0.1:{port}: ")
