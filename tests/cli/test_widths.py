"""Every command's tables and sentences fit ``COLUMNS`` (80, 100, 120): summary's overview and details, check,
advise (the program's answer and ``--each``), diff.  No heading is cut and no two columns of a table share a
heading.  Only a line that is one path (a run's header, ``check``'s ``FAIL PATH``) may be wider: a path is
never broken.  The runs are real (``tests/fixtures/samples``), read from inside that folder so that paths are
short as a user's are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli.advise import FILE_COLUMNS, PROGRAM_COLUMNS
from ringtrace.cli.diff import DIFF_COLUMNS
from ringtrace.cli.text import RING_COLUMNS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SIZING = FIXTURES / "realsim" / "loops" / "bgemm"

COMMANDS = {
    "summary": ["summary", "outputs", "failed"],
    "overview": ["summary", "outputs", "failed", "build_output"],
    "details": ["summary", "--details", "outputs", "failed", "build_output"],
    "check": ["check", "failed", "outputs"],
    "advise": ["advise", str(SIZING)],
    "advise-each": ["advise", "--each", "outputs", "failed"],
    "diff": ["diff", "outputs/TestBenchmarkBgemm_Case0_20261130_101845", "failed/HeapRingDeadlock"],
    "diff-named": ["diff", str(FIXTURES / "inputs/named/before/vector_default.jsonl"),
                   str(FIXTURES / "inputs/named/after/vector_small.jsonl")],
}
PATH_LINE = re.compile(r"^(FAIL |ok |UNREADABLE |A |B |unmatched [AB]: )?\(?[^ ]*/[^ ]*$"
                       r"|^(FAIL |ok |UNREADABLE )?\(no scope_stats file; host log [^ ]*\)$")


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("name", COMMANDS)
def test_every_line_fits_the_terminal(cli: Any, monkeypatch: pytest.MonkeyPatch, name: str, columns: int) -> None:
    monkeypatch.chdir(FIXTURES / "samples")
    monkeypatch.setenv("COLUMNS", str(columns))
    r = cli(*COMMANDS[name])
    lines = r.out.splitlines()
    assert len(lines) > 5, r.out + r.err
    wide = [line for line in lines if len(line) > columns and not PATH_LINE.match(line)]
    assert wide == [], "\n".join(wide)
    assert "…" not in r.out  # nothing cut


@pytest.mark.parametrize("columns", [80, 100, 120])
def test_a_table_too_wide_for_the_terminal_becomes_a_block_per_row_with_every_figure(
        cli: Any, monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """The paged-attention run's ring table: one line a row at 120, wrapped headings and one space between
    columns at 100, blocks at 80;
    every figure and site is there whatever the width."""
    monkeypatch.chdir(FIXTURES / "samples")
    monkeypatch.setenv("COLUMNS", str(columns))
    out = cli("summary", "outputs/TestPagedAttention_big16x2048_tight_20261130_101530").out
    assert out.count("paged_attention_orch.cpp:177") == 4 and "21.0 KiB" in out and "31.2%" in out
    if columns == 80:
        assert "  ring 2 heap\n    capacity 32.0 KiB; proven need 5.0 KiB; need/cap 15.6%;" in out
    else:
        assert re.search(r"\n +2 +heap +32\.0 KiB +5\.0 KiB +15\.6% +26\.0 KiB +21\.0 KiB +7\.0 KiB +"
                         r"paged_attention_orch\.cpp:177\n", out)


@pytest.mark.parametrize("columns", [RING_COLUMNS, PROGRAM_COLUMNS, FILE_COLUMNS, DIFF_COLUMNS])
def test_no_two_columns_of_a_table_share_a_heading_or_a_heading_word(columns: Any) -> None:
    names = [c.name for c in columns]
    words = [w for n in names for w in n.split() if w not in ("at",)]
    assert len(set(names)) == len(names) and len(set(words)) == len(words), names
