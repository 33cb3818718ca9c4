"""A webhook receiver on 127.0.0.1 for Alertmanager's notifications (the cluster harness's pager).

:class:`Receiver` serves ``POST /`` on a free port in a thread and keeps every notification it was sent, with
the wall time it arrived (:class:`Notification`); :meth:`Receiver.received` copies the list.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Notification:
    """One webhook call: Alertmanager's JSON (version 4) and when it arrived (``time.time()``)."""

    at: float
    body: dict[str, Any]

    @property
    def status(self) -> str:
        return str(self.body["status"])

    @property
    def run(self) -> str:
        return str(self.body["groupLabels"].get("run", ""))

    def alerts(self, status: str = "firing") -> list[dict[str, Any]]:
        return [a for a in self.body["alerts"] if a["status"] == status]


class Receiver:
    """``POST`` bodies to ``http://127.0.0.1:PORT/`` are kept; :attr:`url` is the address to give Alertmanager."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._got: list[Notification] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with outer._lock:
                    outer._got.append(Notification(time.time(), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def received(self) -> list[Notification]:
        with self._lock:
            return list(self._got)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
