"""The worked example of ``docs/design.md`` ("Adding a sink") is true: its steps, taken from the page as
written, applied to a copy of the checkout, leave a suite whose docs checks, registry tests and ruff pass,
and a ``watch --once --lines FILE`` that writes a line per finished run.

A step is a fenced block right after a ``<!-- step: ... -->`` comment:

* ``new file PATH``: the block is the file;
* ``in PATH, [after "LINE", ]before "LINE"``: the block goes before the first line equal to the second
  (after the first line equal to the first, when given);
* ``run``: the block is a shell script, run in the copy's root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^<!-- step: ([^\n]*) -->\n```\w*\n(.*?)^```\n", re.S | re.M)
PLACE = re.compile(r'in (\S+), (?:after "(.*?)", )?before "(.*?)"')
LEFT_OUT = ("__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".git", ".venv", "build",
            "test-artifacts", "*.egg-info")


def steps(page: str) -> list[tuple[str, str]]:
    """(what, block) of every step on ``page``, in order."""
    section = page.split("**Adding a sink**", 1)[1].split("\n## ", 1)[0]
    return STEP.findall(section)


def insert(text: str, block: str, after: str, before: str) -> str:
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == after) + 1 if after else 0
    at = next(i for i in range(start, len(lines)) if lines[i].rstrip("\n") == before)
    return "".join([*lines[:at], block, *lines[at:]])


def apply(root: Path, what: str, block: str, env: dict[str, str]) -> None:
    if what.startswith("new file "):
        target = root / what.removeprefix("new file ")
        assert not target.exists(), what
        target.write_text(block)
    elif what == "run":
        proc = subprocess.run(["bash", "-e", "-c", block], cwd=root, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, (block, proc.stdout[-3000:], proc.stderr[-3000:])
    else:
        place = PLACE.fullmatch(what)
        assert place is not None, f"a step this test cannot read: {what!r}"
        target = root / place.group(1)
        target.write_text(insert(target.read_text(), block, place.group(2) or "", place.group(3)))


def venv_for(copy: Path) -> Path:
    """A ``.venv`` in ``copy`` that is this one's (its interpreter and packages), with fresh stamps:
    ``make`` in the copy then neither installs into this venv nor builds the core again."""
    real = Path(sys.prefix)
    venv = copy / ".venv"
    venv.mkdir()
    for entry in real.iterdir():
        if entry.name not in (".installed", ".core"):
            (venv / entry.name).symlink_to(entry)
    for stamp in (".installed", ".core"):
        (venv / stamp).touch()
    return venv


def run(argv: list[str], copy: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True, timeout=600)


def test_steps_are_read_where_the_page_says(tmp_path: Path) -> None:
    """The reading of steps itself: a placement lands where it says, and a page without the example
    has no steps."""
    assert steps("**Adding a sink**\n<!-- step: run -->\n```sh\ntrue\n```\n\n## Next\n"
                 "<!-- step: run -->\n```sh\nfalse\n```\n") == [("run", "true\n")]
    assert insert("a\n)\nb\n)\n", "x\n", "b", ")") == "a\n)\nb\nx\n)\n"
    assert insert("a\n)\n", "x\n", "", ")") == "a\nx\n)\n"


@pytest.mark.slow  # a copy of the checkout, make docs, pytest, ruff and watch in it
def test_the_worked_example_adds_a_sink(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "design.md").read_text()
    todo = steps(page)
    assert [w.split(" ", 1)[0] for w, _ in todo] == ["new", "in", "in", "in", "run"], todo
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*LEFT_OUT))
    venv = venv_for(copy)
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "COLUMNS": "100"}
    env.pop("RINGTRACE_PURE", None)
    for what, block in todo:
        apply(copy, what, block, env)
    python = str(venv / "bin" / "python")
    assert "ringtrace/sinks/lines.py" in run([python, "-c", "import ringtrace.sinks.lines as m; print(m.__file__)"],
                                             copy, env).stdout.replace(str(copy) + "/", "")

    lint = run([str(venv / "bin" / "ruff"), "check", "ringtrace/sinks/lines.py", "ringtrace/reading/registry.py",
                "ringtrace/config.py"], copy, env)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    tests = run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "tests/test_docs.py",
                 "tests/reading/test_registry.py", "-k", "not runnable_examples"], copy, env)
    assert tests.returncode == 0, tests.stdout[-6000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]

    out = copy / "lines.txt"
    samples = ROOT / "tests" / "fixtures" / "samples" / "failed"
    watch = run([python, "-m", "ringtrace", "watch", "--once", "--quiet", "--state-dir", str(tmp_path / "state"),
                 "--lines", str(out), str(samples)], copy, env)
    summary = run([python, "-m", "ringtrace", "summary", "--format", "json", str(samples)], copy, env)
    assert watch.returncode == 0, watch.stderr
    verdicts = sorted(f["verdict"]["text"] for f in json.loads(summary.stdout)["files"])
    assert len(verdicts) == 4 and sorted(line.split(": ", 1)[1] for line in out.read_text().splitlines()) == verdicts
