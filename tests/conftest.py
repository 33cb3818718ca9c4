"""Fixtures every test may use (the helpers they are built from live in ``tests/_support/``), and the lanes.

Lanes: ``make test-fast`` runs ``pytest -m "not slow" -n 2`` (unit and golden tests, about a minute on two cores);
``make test`` runs everything.  A test is ``slow`` when it is marked so (``@pytest.mark.slow``, or
``pytestmark`` for a whole module: real ``ringtrace`` processes, servers, browsers, large inputs), and
automatically when it starts agents (it asks for the ``agents`` fixture) or lives in ``tests/e2e``
or ``tests/deploy``.

* ``_clean_env`` (autouse): no ``RINGTRACE_*`` setting and no ``COLUMNS`` of the developer's shell (or of
  pytest-xdist's workers, which set 80) leaks into a test (``RINGTRACE_PURE`` stays: ``make test`` runs
  the stage and reading tests with it, and the commands those tests start must read with the same path).
* ``cli`` — ``cli(*argv)`` runs ``ringtrace.cli.main`` in-process and returns a
  :class:`tests._support.cli.Result`; it fails the test if the command printed a traceback.
* ``write_jsonl`` — write a file of dicts (JSON-encoded as the runtime does) and raw
  ``str``/``bytes`` lines into ``tmp_path``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from ringtrace.cli import main
from tests._support.cli import Result
from tests._support.scope_stats import Line, WriteJsonl, encode_lines


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("RINGTRACE_") and key != "RINGTRACE_PURE":
            monkeypatch.delenv(key)
    monkeypatch.delenv("COLUMNS", raising=False)  # commands print 160 wide to a pipe unless a test sets it


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str | Path) -> Result:
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        assert "Traceback" not in err
        return Result(code, out, err)

    return run


@pytest.fixture
def write_jsonl(tmp_path: Path) -> WriteJsonl:
    """``write_jsonl(lines, name="scope_stats.jsonl", newline=b"\\n", final_newline=True) -> Path``."""

    def write(lines: Sequence[Line], name: str = "scope_stats.jsonl", newline: bytes = b"\n",
              final_newline: bool = True) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_lines(lines, newline, final_newline))
        return path

    return write


SLOW_FIXTURES = {"agents"}
SLOW_FOLDERS = {"e2e", "deploy"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``slow`` what starts agents or lives in an end-to-end folder (see the module docstring)."""
    for item in items:
        folders = set(item.path.relative_to(Path(__file__).parent).parts[:-1])
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())) or SLOW_FOLDERS & folders:
            item.add_marker(pytest.mark.slow)
