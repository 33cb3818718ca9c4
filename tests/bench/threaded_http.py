"""The baseline for bench_http.py: the hand-written metrics server ringtrace had before aiohttp.

Its ``/metrics`` path as it was (``ThreadingHTTPServer``, one daemon thread per connection, a
10 s socket timeout, HTTP/1.1 keep-alive, gzip when accepted), without the web config (the
benchmark scrapes plain HTTP without credentials, the same for both servers).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Render = Callable[[str], tuple[bytes, str]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, addr: tuple[str, int], render: Render) -> None:
        self.render = render
        super().__init__(addr, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = 10.0
    server_version = "ringtrace"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404)
            return
        body, content_type = self.server.render(self.headers.get("Accept", ""))
        extra = {}
        if "gzip" in self.headers.get("Accept-Encoding", ""):
            body = gzip.compress(body, compresslevel=5)
            extra["Content-Encoding"] = "gzip"
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class ThreadedServer:
    """``start()`` binds and serves on a daemon thread; ``stop()`` closes the socket."""

    def __init__(self, host: str, port: int, render: Render) -> None:
        self._server = _Server((host, port), render)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
