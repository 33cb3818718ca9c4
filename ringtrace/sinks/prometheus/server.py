"""The metrics HTTP server: aiohttp's web server in the app's event loop.

* ``/metrics``: ``render(accept)`` -> (body, content type), called in a worker thread so a scrape
  never blocks the loop.  The body may come in pieces (:class:`~ringtrace.sinks.prometheus.exposition.Chunks`,
  made in worker threads as they are sent): streamed as they come, or compressed one by one, so a
  large exposition is never held whole.  gzip when ``Accept-Encoding`` allows it (ISA-L's deflate,
  level 2: ~20x faster than zlib's level 5 on a large exposition); the gzip of pieces whose key equals
  the last one's is sent again, not made again.  A failing render answers a
  generic 500 and is logged.
* ``/healthz`` (200 while the process serves) and ``/readyz`` (200 when ``ready()``, else 503,
  with the reason ``ready()`` gives, e.g. the name of a stuck sink) answer without
  authentication: they tell nothing but "ok" or what is not, so probes need no secret.
* ``/report/<run>/<rank>/<dispatch>`` and ``/trace/<run>/<rank>/<dispatch>`` (the alerts' links): the
  file ``files[kind].find`` names for those labels (URL-decoded, ``+`` a space as Go's ``urlquery`` writes
  it), sent with ``files[kind].headers``; 404 with one line when there is none, 400 for a label with ``/``,
  ``..`` or NUL.  The same authentication as ``/metrics``.
* ``--web-config FILE`` (:mod:`ringtrace.sinks.prometheus.webconfig`): TLS, client certificates, bcrypt
  basic auth, extra headers.  The listening socket is plain; each accepted connection is upgraded
  with ``loop.start_tls`` using the TLS context in force at that moment, so edits and renewed
  certificates apply to the next connection or request without a restart.

Hostile clients (the server is reachable from the network):

* at most ``max_connections`` connections; at the cap a new one closes an idle connection (one
  between keep-alive requests first, else the one waiting longest for its first request or its
  TLS handshake), or is itself closed when every connection is busy with a request;
* a connection idle for ``connection_timeout`` seconds (headers or handshake never finished) is closed
  (not ``watch --idle-timeout``, the time after which a run that stopped changing is finished);
  a request (render and response write) gets ``request_timeout`` seconds;
* bcrypt checks run on a small pool of their own: floods of bad credentials cannot take the
  threads that render scrapes;
* no response carries exception text or a version (``Server: ringtrace``, generic error bodies,
  aiohttp's own parser errors included).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path
from typing import NamedTuple, cast
from urllib.parse import unquote_plus

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from isal import isal_zlib

from ringtrace.sinks.prometheus.exposition import Chunks
from ringtrace.sinks.prometheus.webconfig import Active, BasicAuth, WebConfigError, WebSettings, load_web_config

__all__ = ["Files", "MetricsServer", "Render", "WebConfigError", "load_web_config", "parse_addr"]

log = logging.getLogger("ringtrace.http")

Render = Callable[[str], tuple[bytes | Chunks, str]]
Ready = Callable[[], bool | tuple[bool, str]]
"""Readiness: a bool, or (ready, why not) whose reason /readyz shows after ``not ready: ``."""


class Files(NamedTuple):
    """A kind of file served by run: ``find(run, rank, dispatch)`` -> the file, or None when there is none
    (called in a worker thread), and the headers its answer adds."""

    find: Callable[[str, str, str], Path | None]
    headers: Mapping[str, str] = {}


MAX_CONNECTIONS = 64
CONNECTION_TIMEOUT = 10.0
REQUEST_TIMEOUT = 30.0
EARLY_BYTES = 64 * 1024  # decrypted bytes buffered between the TLS handshake and the handler's start
SERVER = "ringtrace"
TEXT = "text/plain; charset=utf-8"
_PAGE = (b"<html><head><title>ringtrace</title></head><body><h1>ringtrace exporter</h1>"
         b'<p><a href="/metrics">metrics</a> <a href="/healthz">healthz</a> '
         b'<a href="/readyz">readyz</a></p></body></html>\n')


def _text(status: int, headers: dict[str, str], extra: dict[str, str] | None = None) -> web.Response:
    """A generic plain-text answer: the status line's phrase, nothing else."""
    body = f"{HTTPStatus(status).phrase}\n".encode()
    return web.Response(status=status, body=body, headers={**headers, "Content-Type": TEXT, **(extra or {})})


def _line(status: int, line: str, headers: dict[str, str]) -> web.Response:
    return web.Response(status=status, body=line.encode(), headers={**headers, "Content-Type": TEXT})


class _AccessLog(AbstractAccessLogger):
    """aiohttp's access log, at debug level (a scrape every 15 s is not news)."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.debug("%s %s %s -> %d in %.3fs", request.remote, request.method, request.path,
                          response.status, time)

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.DEBUG)


class _Conn(web.RequestHandler):
    """One connection: aiohttp's HTTP/1.1 protocol plus admission, idle timeout and TLS upgrade.

    Idle = no request in progress.  ``connection_made`` admits (or refuses) the connection; for
    TLS the raw transport is paused, upgraded with ``start_tls``, and only then handed to
    aiohttp.  Bytes decrypted before that are buffered (bounded) and replayed.  Our attributes
    are ``_rt_``-prefixed to stay clear of aiohttp's.
    """

    def __init__(self, owner: MetricsServer, web_server: web.Server, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(web_server, loop=loop, keepalive_timeout=owner.connection_timeout, logger=log,
                         access_log_class=_AccessLog, access_log=log, lingering_time=1.0)
        self._rt_owner = owner
        self._rt_loop = loop
        self.busy = False
        self.idle_since = loop.time()
        self.served = 0  # requests answered on this connection
        self._rt_link: asyncio.Transport | None = None  # the raw transport, then the TLS one
        self._rt_serving = False  # handed to aiohttp
        self._rt_gone = False  # refused or lost
        self._rt_early = bytearray()
        self._rt_early_eof = False
        self._rt_timer: asyncio.TimerHandle | None = None
        self._rt_task: asyncio.Task[None] | None = None  # the TLS upgrade (referenced: tasks are weakly held)

    # -- asyncio protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        raw = cast(asyncio.Transport, transport)
        if not self._rt_owner.admit(self):
            self._rt_gone = True
            raw.abort()
            return
        self._rt_link = raw
        self._rt_arm()
        if self._rt_owner.tls:
            raw.pause_reading()
            self._rt_task = self._rt_loop.create_task(self._rt_upgrade(raw))
        else:
            self._rt_begin(raw)

    def data_received(self, data: bytes) -> None:
        if self._rt_serving:
            super().data_received(data)
            return
        self._rt_early += data
        if len(self._rt_early) > EARLY_BYTES:
            self.rt_abort()

    def eof_received(self) -> None:
        if self._rt_serving:
            super().eof_received()
        else:
            self._rt_early_eof = True

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._rt_gone:
            return
        self._rt_gone = True
        self._rt_owner.release(self)
        if self._rt_timer is not None:
            self._rt_timer.cancel()
        if self._rt_serving:
            super().connection_lost(exc)

    # -- ours -------------------------------------------------------------------------------

    def rt_abort(self) -> None:
        """Close the connection now (no TLS close_notify, unsent data dropped)."""
        if self._rt_link is not None:
            self._rt_link.abort()

    def rt_close(self) -> None:
        """Close the connection after what was written is sent (an idle connection has nothing pending)."""
        if self._rt_link is not None:
            self._rt_link.close()

    def request_started(self) -> None:
        self.busy = True
        if self._rt_timer is not None:
            self._rt_timer.cancel()

    def request_done(self) -> None:
        self.busy = False
        self.served += 1
        self.idle_since = self._rt_loop.time()
        if not self._rt_gone:
            self._rt_arm()

    def _rt_arm(self) -> None:
        if self._rt_timer is not None:
            self._rt_timer.cancel()
        self._rt_timer = self._rt_loop.call_later(self._rt_owner.connection_timeout, self._rt_expire)

    def _rt_expire(self) -> None:
        if not self.busy and not self._rt_gone:
            log.debug("closing a metrics connection idle for %.1fs", self._rt_owner.connection_timeout)
            self.rt_close()

    def _rt_begin(self, transport: asyncio.Transport) -> None:
        self._rt_serving = True
        super().connection_made(transport)
        early, self._rt_early = bytes(self._rt_early), bytearray()
        if early:
            super().data_received(early)
        if self._rt_early_eof:
            super().eof_received()

    async def _rt_upgrade(self, raw: asyncio.Transport) -> None:
        owner = self._rt_owner
        try:
            active = await owner.current()
            if self._rt_gone or active.context is None:
                raise ConnectionAbortedError("closed before the TLS handshake")
            tls = await self._rt_loop.start_tls(raw, self, active.context, server_side=True,
                                                ssl_handshake_timeout=owner.connection_timeout,
                                                ssl_shutdown_timeout=owner.connection_timeout)
            if tls is None or self._rt_gone:
                raise ConnectionAbortedError("closed during the TLS handshake")
        except Exception as err:  # handshake failures of every kind: the client's problem, not ours
            log.debug("TLS handshake with a metrics client failed: %s", err)
            raw.abort()
            self.connection_lost(None)
            return
        self._rt_link = tls
        self._rt_begin(tls)

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """aiohttp's answer to requests it cannot parse: generic, without the parser's message."""
        log.debug("bad metrics request from %s: %s", request.remote, message or exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the response was sent already")
        resp = _text(status, {"Server": SERVER})
        resp.force_close()
        return resp


def parse_addr(addr: str) -> tuple[str, int, socket.AddressFamily]:
    """``HOST:PORT`` (``[::1]:9464``, ``0.0.0.0:9464``, ``:9464``) -> (host, port, family)."""
    host, sep, port_s = addr.rpartition(":")
    if not sep or not port_s.isdigit() or int(port_s) > 65535:
        raise ValueError(f"invalid address {addr!r}: expected HOST:PORT, e.g. 127.0.0.1:9464")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return host, int(port_s), family


class MetricsServer:
    """Serves ``render`` on ``addr`` (port 0 picks a free port: read :attr:`port` after :meth:`start`).

    ``web_config`` is read and validated here (raises :class:`WebConfigError`).  ``ready`` is
    called on every ``/readyz`` request, on the event loop: it must be cheap (see :data:`Ready`).  ``render`` is
    called in a worker thread and must be thread-safe.  :meth:`start` and :meth:`stop` run in
    the event loop that serves.
    """

    def __init__(self, addr: str, render: Render, ready: Ready = lambda: True,
                 web_config: Path | None = None, *, files: Mapping[str, Files] | None = None,
                 max_connections: int = MAX_CONNECTIONS, connection_timeout: float = CONNECTION_TIMEOUT,
                 request_timeout: float = REQUEST_TIMEOUT) -> None:
        self.host, self._port, self.family = parse_addr(addr)
        self.render = render
        self.ready = ready
        self.files = dict(files or {})
        self.settings = WebSettings(web_config)
        self.max_connections = max_connections
        self.connection_timeout = connection_timeout
        self.request_timeout = request_timeout
        self.evicted = 0  # idle connections closed to make room
        self.refused = 0  # connections closed at once: every slot busy
        self._conns: dict[_Conn, None] = {}
        self._server: asyncio.Server | None = None
        self._web: web.Server | None = None
        self._auth_pool: ThreadPoolExecutor | None = None
        self._reload_lock: asyncio.Lock | None = None
        self._warned_at = -1e9
        self._zipped: tuple[Hashable, bytes] | None = None  # the key of the last pieces compressed, and their gzip

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    @property
    def tls(self) -> bool:
        cfg = self.settings.active.config
        return cfg is not None and cfg.tls

    @property
    def auth(self) -> BasicAuth:
        """The basic-auth checker in force."""
        return self.settings.active.auth

    @property
    def connections(self) -> int:
        """Open connections (admitted, not yet closed)."""
        return len(self._conns)

    async def start(self) -> None:
        """Bind and serve in the running loop (raises OSError when the address is taken)."""
        loop = asyncio.get_running_loop()
        dual = self.family == socket.AF_INET6 and self.host in ("", "::") and socket.has_dualstack_ipv6()
        sock = socket.create_server((self.host, self._port), family=self.family, backlog=128, dualstack_ipv6=dual)
        self._web = web.Server(self._handle, handler_cancellation=True)
        self._auth_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ringtrace-bcrypt")
        self._reload_lock = asyncio.Lock()
        web_server = self._web
        try:
            self._server = await loop.create_server(lambda: _Conn(self, web_server, loop), sock=sock)
        except BaseException:
            sock.close()
            self._auth_pool.shutdown(wait=False)
            raise

    async def stop(self) -> None:
        """Stop accepting, close every connection, free the port."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for conn in list(self._conns):
            conn.rt_abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await server.wait_closed()
        if self._web is not None:
            await self._web.shutdown(1.0)
        if self._auth_pool is not None:
            self._auth_pool.shutdown(wait=False, cancel_futures=True)

    # -- connections ------------------------------------------------------------------------

    def admit(self, conn: _Conn) -> bool:
        """Make room for ``conn`` (closing the longest-idle connection at the cap) or refuse it."""
        if self._server is None:  # accepted just before stop()
            return False
        if len(self._conns) >= self.max_connections:
            idle = [c for c in self._conns if not c.busy]
            if idle:
                # keep-alive connections first (their client reconnects at no loss), then the oldest
                victim = min(idle, key=lambda c: (c.served == 0, c.idle_since))
                self._conns.pop(victim, None)
                victim.rt_close()
                self.evicted += 1
            else:
                self.refused += 1
            now = time.monotonic()
            if now - self._warned_at > 60:
                self._warned_at = now
                log.warning("metrics server at its cap of %d connections: %d idle connection(s) closed, "
                            "%d refused so far", self.max_connections, self.evicted, self.refused)
            if not idle:
                return False
        self._conns[conn] = None
        return True

    def release(self, conn: _Conn) -> None:
        self._conns.pop(conn, None)

    async def current(self) -> Active:
        """The web config in force, reloaded first (off the loop) when one of its files changed."""
        settings = self.settings
        if settings.changed() and self._reload_lock is not None:
            async with self._reload_lock:
                await asyncio.to_thread(settings.reload)
        return settings.active

    # -- requests ---------------------------------------------------------------------------

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        conn = cast(_Conn, request.protocol)  # every connection is made by start()'s _Conn factory
        conn.request_started()
        try:
            try:
                async with asyncio.timeout(self.request_timeout):
                    resp = await self._route(request)
            except TimeoutError:
                log.error("a metrics request (%s) took over %.0fs; answered 503", request.path,
                          self.request_timeout)
                resp = _text(503, {"Server": SERVER})
            except ConnectionError:
                raise
            except Exception as err:
                log.error("metrics request %s failed: %s", request.path, err, exc_info=log.isEnabledFor(logging.DEBUG))
                resp = _text(500, {"Server": SERVER})
            try:
                async with asyncio.timeout(self.request_timeout):
                    await resp.prepare(request)
                    await resp.write_eof()
            except TimeoutError:
                log.debug("a metrics client did not read its response within %.0fs", self.request_timeout)
                conn.rt_abort()
            return resp
        finally:
            conn.request_done()

    async def _route(self, request: web.BaseRequest) -> web.StreamResponse:
        active = await self.current()
        headers = {"Server": SERVER, **active.headers}
        if request.method not in ("GET", "HEAD"):
            return _text(405, headers, {"Allow": "GET, HEAD"})
        path = request.path
        if path == "/healthz":
            return web.Response(body=b"ok\n", headers={**headers, "Content-Type": TEXT})
        if path == "/readyz":
            try:
                got = self.ready()
                ready, why = got if isinstance(got, tuple) else (bool(got), "")
            except Exception:
                log.debug("ready() failed", exc_info=True)
                ready, why = False, ""
            body = b"ready\n" if ready else (f"not ready: {why}\n" if why else "not ready\n").encode()
            return web.Response(status=200 if ready else 503, body=body, headers={**headers, "Content-Type": TEXT})
        auth, given = active.auth, request.headers.get("Authorization")
        if not auth.known(given) and not await asyncio.get_running_loop().run_in_executor(
                self._auth_pool, auth.check, given):  # bcrypt: slow by design, on its own pool
            return _text(401, headers, {"WWW-Authenticate": 'Basic realm="ringtrace"'})
        if path == "/metrics":
            zipped = "gzip" in request.headers.get("Accept-Encoding", "")
            try:
                exposed, content_type = await asyncio.to_thread(self.render, request.headers.get("Accept", ""))
                if zipped or request.method == "HEAD" or isinstance(exposed, bytes):
                    exposed = await asyncio.to_thread(self._gzip if zipped else _joined, exposed)
            except Exception as err:
                log.error("collecting metrics failed: %s", err, exc_info=log.isEnabledFor(logging.DEBUG))
                return _text(500, headers)
            extra = {"Content-Encoding": "gzip"} if zipped else {}
            headers = {**headers, "Content-Type": content_type, **extra}
            if isinstance(exposed, bytes):
                return web.Response(body=exposed, headers=headers)
            return await _stream(request, exposed, headers)
        kind, *labels = request.rel_url.raw_path.split("/")[1:]
        if kind in self.files and len(labels) == 3:
            return await self._file(kind, [unquote_plus(label) for label in labels], headers)
        if path == "/":
            return web.Response(body=_PAGE, headers={**headers, "Content-Type": "text/html; charset=utf-8"})
        return _text(404, headers)

    async def _file(self, kind: str, labels: list[str], headers: dict[str, str]) -> web.StreamResponse:
        """The ``kind`` file of the run ``labels`` name, or a one-line 404 (400 for a label naming a path)."""
        if any("/" in label or ".." in label or "\0" in label for label in labels):
            return _line(400, "a run label may not hold '/', '..' or NUL\n", headers)
        files = self.files[kind]
        found = await asyncio.to_thread(files.find, *labels)
        if found is None:
            return _line(404, f"no {kind} of that run, rank and dispatch here\n", headers)
        return web.FileResponse(found, headers={**headers, **files.headers})

    def _gzip(self, got: bytes | Chunks) -> bytes:
        """``got`` compressed, a piece at a time; the last gzip again for pieces with the same key."""
        key = got.key if isinstance(got, Chunks) else None
        last = self._zipped
        if key is not None and last is not None and last[0] == key:
            return last[1]
        if isinstance(got, Chunks) and got.gzipped is not None:
            packed = got.gzipped()
        else:
            comp = isal_zlib.compressobj(2, isal_zlib.DEFLATED, 16 + isal_zlib.MAX_WBITS)  # a gzip stream
            out = [comp.compress(piece) for piece in ((got,) if isinstance(got, bytes) else got)]
            out.append(comp.flush())
            packed = b"".join(out)
        if key is not None:
            self._zipped = (key, packed)
        return packed


def _joined(got: bytes | Chunks) -> bytes:
    return got if isinstance(got, bytes) else b"".join(got)


async def _stream(request: web.BaseRequest, pieces: Chunks, headers: dict[str, str]) -> web.StreamResponse:
    """Send ``pieces`` as they are made (each in a worker thread); a failure midway closes the connection."""
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    try:
        while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
            await resp.write(piece)
    except Exception as err:
        log.error("collecting metrics failed midway: %s", err, exc_info=log.isEnabledFor(logging.DEBUG))
        raise ConnectionResetError("the metrics response was cut") from err
    await resp.write_eof()
    return resp
