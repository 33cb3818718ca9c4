"""The docs tell the truth: the README's synopsis is the real ``--help`` usage of every command, every
command has its page section, every alert its runbook, and the shell examples marked ``runnable`` run."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from ringtrace.cli import HELP, main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def usage(command: str) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf), pytest.raises(SystemExit):
        main([command, "--help"])
    return buf.getvalue().split("\n\n", 1)[0]


def test_the_readme_is_a_front_door_with_the_real_synopsis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps the usage to the terminal
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    block = re.search(r"<!-- generated: synopsis[^\n]*-->\n```\n(.*?)\n```\n<!-- /generated: synopsis -->", text,
                      re.S)
    assert block is not None
    order = ["summary", "check", "advise", "report", "convert", "watch", "diff", "demo"]
    assert sorted(order) == sorted(HELP)
    assert block.group(1) == "\n".join(usage(c) for c in order)
    for link in re.findall(r"\]\((docs/[\w.]+)\)", text):
        assert (ROOT / link).is_file(), link


def test_the_readme_says_what_the_commands_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's samples ("What it says") are the commands' output on the committed real runs, line for
    line (its ``...`` lines stand for lines left out)."""
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.chdir(ROOT / "tests/fixtures/realsim")
    text = README.read_text().split("## What it says", 1)[1].split("## Synopsis", 1)[0]
    blocks = re.findall(r"```\n(.*?)\n```", text, re.S)
    said: list[tuple[list[str], str]] = []  # (argv, the sample's lines)
    first = blocks[0].split("$ ringtrace ")[1:]
    for part in first:
        argv, _, lines = part.partition("\n")
        said.append((argv.split(), lines))
    said.append((["advise", "outputs/"], blocks[1]))
    for argv, sample in said:
        buf = io.StringIO()
        with redirect_stdout(buf):
            main(argv)
        real = buf.getvalue().splitlines()
        for line in sample.splitlines():
            if line.strip() in ("...", ""):
                continue
            cut = line.removesuffix(" ...")
            assert any(r.startswith(cut) if cut != line else r == line for r in real), (argv, line)


def test_every_command_has_its_section_and_every_alert_its_runbook() -> None:
    commands = (DOCS / "commands.md").read_text() + (DOCS / "outputs.md").read_text() + \
        (DOCS / "operations.md").read_text()
    for name in HELP:
        assert f"ringtrace {name}" in commands, name
    runbooks = (DOCS / "runbooks.md").read_text()
    rules = yaml.safe_load((ROOT / "deploy" / "prometheus" / "ringtrace-alerts.yml").read_text())
    alerts = [r for g in rules["groups"] for r in g["rules"] if "alert" in r]
    assert alerts
    for r in alerts:
        assert f"#### Alert {r['alert']}\n" in runbooks, r["alert"]
        assert r["annotations"]["runbook_url"].endswith("docs/runbooks.md#alert-" + r["alert"].lower())


def runnable_blocks() -> list[tuple[str, str]]:
    out = []
    for page in sorted(DOCS.glob("*.md")):
        for i, block in enumerate(re.findall(r"```sh runnable\n(.*?)```", page.read_text(), re.S)):
            out.append((f"{page.name}#{i}", block))
    return out


@pytest.mark.slow  # the generator over every sample and exporter; examples as processes
@pytest.mark.parametrize(("where", "script"), runnable_blocks())
def test_the_runnable_examples_run(where: str, script: str, tmp_path: Path) -> None:
    fixtures = ROOT / "tests" / "fixtures"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "SAMPLES": str(fixtures / "samples"), "SIZING": str(fixtures / "sizing"),
           "REALSIM": str(fixtures / "realsim")}
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (where, proc.stdout, proc.stderr)


@pytest.mark.slow  # the generator over every sample and exporter; examples as processes
def test_the_generated_tables_are_current() -> None:
    """The metrics, settings, options and error-code tables are what ``docs/generate.py`` makes of
    the code now (``make docs`` rewrites them)."""
    res = subprocess.run([sys.executable, str(DOCS / "generate.py"), "--check"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr


@pytest.mark.slow  # the generator over every sample and exporter; examples as processes
def test_the_generator_sees_a_stale_table(tmp_path: Path) -> None:
    """--check fails on a page whose table lost a row or gained a wrong default, and names the page."""
    pages = tmp_path / "docs"
    shutil.copytree(DOCS, pages)
    shutil.copy(README, tmp_path / "README.md")
    ref = pages / "reference.md"
    text = ref.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `ringtrace_run_failed` |"))
    ref.write_text(text.replace(row + "\n", "").replace("| `RINGTRACE_IDLE_TIMEOUT` | 30 |",
                                                        "| `RINGTRACE_IDLE_TIMEOUT` | 60 |"))
    res = subprocess.run([sys.executable, str(DOCS / "generate.py"), "--check", "--root", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 1 and "1 page(s) stale" in res.stderr
    assert f"+{row}" in res.stdout
    assert "+| `idle_timeout` | `--idle-timeout` | `RINGTRACE_IDLE_TIMEOUT` | 30 |" in res.stdout
