"""The report page in real headless Chromium (Debian's, through Playwright), offline; shared by ``tests/report/``.

:func:`write_report` runs the real ``ringtrace report`` command; :class:`Browser` opens a page from ``file://``
with every request other than the page itself refused and recorded, and collects console and page errors;
:func:`summary_json` / :func:`advise_json` run the real commands whose figures the page must show.  Screenshots go
to ``test-artifacts/report/`` (git-ignored; ``make report-shots`` copies the ones the docs show into
``docs/img/``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests._support.perfetto_ui import CHROMIUM, CHROMIUM_ARGS
from tests._support.require import require

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "report"
FIXTURES = ROOT / "tests" / "fixtures" / "report"
PA_LOOP = FIXTURES / "pa_var4_loop" / "outputs"
"""Five real runs of one program (paged attention, CaseVarSeq4) from the tuning loop: 3 completed, 2 failed."""


def ringtrace(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringtrace", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def write_report(out: Path, *paths: Path) -> Path:
    """The real ``ringtrace report`` on ``paths`` (from the checkout's root, paths inside it relative, as a user
    would type them: the pages and their screenshots show ``tests/fixtures/...``)."""
    shown = [os.path.relpath(p, ROOT) if p.resolve().is_relative_to(ROOT) else str(p) for p in paths]
    proc = ringtrace("report", *shown, "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def summary_json(*paths: Path) -> list[dict[str, Any]]:
    proc = ringtrace("summary", "--format", "json", *map(str, paths))
    files: list[dict[str, Any]] = json.loads(proc.stdout)["files"]
    return files


def advise_json(*paths: Path) -> list[dict[str, Any]]:
    proc = ringtrace("advise", "--format", "json", *map(str, paths))
    programs: list[dict[str, Any]] = json.loads(proc.stdout)["programs"]
    return programs


def amount(resource: str, n: int | None) -> str:
    """The page's own formatting of a figure in its tables (page.util.js ``amount``)."""
    if n is None:
        return "-"
    if resource != "heap":
        return str(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def name_of(obj: dict[str, Any]) -> str:
    """A source's name as the page shows it (``Source.name``)."""
    lab = obj["labels"]
    parts = [p for p in (lab["run"], f"rank{lab['rank']}" if lab["rank"] else "",
                         f"d{lab['dispatch']}" if lab["dispatch"] else "") if p]
    return "/".join(parts) or obj["path"] or ""


class Opened:
    """One open page: ``errors`` (console errors and page errors) and ``requests`` (refused) so far."""

    def __init__(self, page: Any, errors: list[str], requests: list[str]) -> None:
        self.page, self.errors, self.requests = page, errors, requests

    def clean(self) -> bool:
        return self.errors == [] and self.requests == []

    def shot(self, name: str, selector: str | None = None, until: str | None = None) -> Path:
        """``test-artifacts/report/<name>.png``: the whole page, the element ``selector``, or the page from that
        element's top to the bottom of the element ``until`` (a picture small enough for the docs)."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        if selector is None:
            self.page.screenshot(path=str(path), full_page=True)
        elif until is None:
            self.page.locator(selector).first.screenshot(path=str(path))
        else:
            top, end = (self.page.evaluate(
                "(s) => { const r = document.querySelector(s).getBoundingClientRect(); "
                "return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, b: r.bottom + scrollY}; }", sel)
                for sel in (selector, until))
            clip = {"x": top["x"], "y": top["y"], "width": top["w"], "height": end["b"] - top["y"] + 4}
            self.page.screenshot(path=str(path), full_page=True, clip=clip)
        return path


class Browser:
    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)

    def open(self, page_path: Path, width: int = 1300) -> Opened:
        page = self.browser.new_page(viewport={"width": width, "height": 900})
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        url = page_path.resolve().as_uri()

        def route(r: Any) -> None:
            if r.request.url == url:
                r.continue_()
            else:
                requests.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        return Opened(page, errors, requests)

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


@contextmanager
def browser() -> Iterator[Browser]:
    """Chromium for a test module; skips (fails in CI) without Chromium or Playwright."""
    require(Path(CHROMIUM).exists(), f"{CHROMIUM} not installed (apt install chromium; make test installs it)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        require(False, "playwright not installed (pip install playwright; no browser download needed)")
    b = Browser()
    try:
        yield b
    finally:
        b.close()


BOXES_JS = """(sel) => [...document.querySelectorAll(sel)].map(e => { const r = e.getBoundingClientRect();
  return {x: r.left, y: r.top, w: r.width, h: r.height, text: e.textContent}; })"""


def boxes(page: Any, selector: str) -> list[dict[str, Any]]:
    """The on-screen boxes (and texts) of every element matching ``selector``."""
    out: list[dict[str, Any]] = page.evaluate(BOXES_JS, selector)
    return out


def overlapping(bs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Pairs of boxes that overlap (by more than a pixel each way)."""
    out = []
    for i, a in enumerate(bs):
        for b in bs[i + 1:]:
            if (a["x"] + a["w"] - 1 > b["x"] and b["x"] + b["w"] - 1 > a["x"]
                    and a["y"] + a["h"] - 1 > b["y"] and b["y"] + b["h"] - 1 > a["y"]):
                out.append((a["text"], b["text"]))
    return out
