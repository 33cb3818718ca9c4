"""A real ``ringtrace watch`` process (or any process serving ``--metrics-addr``) seen from outside.

:class:`Proc` starts ``argv``, collects its stderr lines on a thread as they come, and reads the
metrics server on 127.0.0.1:PORT: :meth:`Proc.get` a path, :meth:`Proc.metric` a sample,
:meth:`Proc.ready` ``/readyz``.  :class:`Agent` is ``ringtrace watch ROOT --events EV`` with a
free port and a short rescan interval.  Nothing here waits on the wall clock except
:meth:`Proc.stop`'s deadline for the exit; tests wait with :func:`tests._support.writer.wait_for`.
The ``agents`` fixture (``tests/reading/conftest.py``) kills what a test left running.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests._support.ports import free_port
from tests._support.samples import SMALL

NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search",
          "--"]
"""A prefix that runs a command as root without the capabilities to read any file, so the mode
bits of a directory's owner apply (the unreadable-file tests run as root here)."""

STOP_TIMEOUT = 60.0
"""How long :meth:`Proc.stop` waits for the exit before the test fails (a deadline, not a pause)."""


class Proc:
    """A process with ``--metrics-addr 127.0.0.1:PORT``; its stderr lines are collected as they come."""

    def __init__(self, argv: list[str], port: int, stdout: int | None = subprocess.DEVNULL) -> None:
        self.port = port
        self.proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, text=True, errors="replace")
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._collect, daemon=True)
        self._t.start()

    def _collect(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def stderr(self) -> str:
        return "".join(self.lines)

    def get(self, path: str) -> tuple[int, str]:
        """(HTTP status, body) of ``path``; (0, "") while nothing listens."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")
        except OSError:
            return 0, ""

    def metric(self, selector: str) -> float | None:
        """The sum of the samples ``selector`` picks, or None if /metrics does not answer or none matches.

        ``selector`` is a metric name (every series of it) or a name with the start of its labels
        (``'ringtrace_sink_stuck{sink="events"}'``).
        """
        code, body = self.get("/metrics")
        if code != 200:
            return None
        starts = (selector,) if "{" in selector else (selector + " ", selector + "{")
        values = [float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(starts)]
        return sum(values) if values else None

    def ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def stop(self) -> tuple[int, float]:
        """SIGTERM; (exit code, seconds from the signal to the exit).  Prints stderr for the test log."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=STOP_TIMEOUT)
        took = time.monotonic() - t
        self._t.join(timeout=10)
        print(self.stderr())
        return code, took


class Agent(Proc):
    """``ringtrace watch ROOT --events EV --metrics-addr 127.0.0.1:PORT`` (a free port), ``--log-level
    info --rescan-interval 0.5`` and ``extra``; ``prefix`` runs it under another command (:data:`NO_DAC`)."""

    def __init__(self, root: str, ev: Path, *extra: str, prefix: list[str] | None = None) -> None:
        self.ev = ev
        port = free_port()
        super().__init__([*(prefix or []), sys.executable, "-m", "ringtrace", "watch", root,
                          "--events", str(ev), "--log-level", "info",
                          "--metrics-addr", f"127.0.0.1:{port}", "--rescan-interval", "0.5", *extra], port)


def events(path: Path) -> list[dict[str, Any]]:
    """The whole lines of an events file, parsed (a line still being written is left out)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def put_run(root: Path, name: str, src: Path = SMALL) -> Path:
    """Copy ``src`` to ``root/name/scope_stats/scope_stats.jsonl`` so that it appears whole (a rename)."""
    d = root / name / "scope_stats"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / ".incoming"
    shutil.copy(src, tmp)
    tmp.rename(d / "scope_stats.jsonl")
    return d / "scope_stats.jsonl"
