"""The metrics HTTP server: ``/metrics``, ``/healthz``, ``/readyz``; optional TLS and basic auth.

* ``/metrics``: the registry in the Prometheus text format, or OpenMetrics when the ``Accept``
  header asks for ``application/openmetrics-text``; gzip when ``Accept-Encoding`` allows it.
* ``/healthz``: 200 while the process serves; ``/readyz``: 200 when ``ready()`` is true, else 503.
  Both answer without authentication (they tell nothing but "ok"), so probes need no secret.
* ``--web-config FILE``: the Prometheus exporter-toolkit format (``tls_server_config``,
  ``basic_auth_users`` with bcrypt hashes, ``http_server_config.headers``).  Relative file names
  are relative to FILE.  FILE and the certificate files are re-read when they change, for new
  connections, without a restart (a broken edit is logged and the previous config kept).

Threads: :class:`MetricsServer` accepts on its own thread and serves each connection on a
short-lived daemon thread (TLS handshakes happen there too), so a slow or hostile client never
blocks the reader or other scrapes.  Every socket has a timeout.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import bcrypt
import yaml
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("ringtrace.http")

SOCKET_TIMEOUT = 10.0
AUTH_CACHE = 256
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
             "prefer_server_cipher_suites"}
_UNSUPPORTED_TLS = {"cipher_suites", "curve_preferences", "client_allowed_sans", "cert", "key"}


class WebConfigError(Exception):
    """The web config file is unreadable or invalid; the message names the file and the key."""


@dataclass(frozen=True)
class WebConfig:
    """A parsed exporter-toolkit web config (paths resolved)."""

    path: Path
    cert_file: Path | None = None
    key_file: Path | None = None
    client_ca_file: Path | None = None
    client_auth: ssl.VerifyMode = ssl.CERT_NONE
    min_version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
    max_version: ssl.TLSVersion | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def watched_files(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.path, self.cert_file, self.key_file, self.client_ca_file) if p is not None)

    def ssl_context(self) -> ssl.SSLContext:
        """A server context for the configured certificate (raises WebConfigError)."""
        assert self.cert_file is not None and self.key_file is not None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.min_version
        if self.max_version is not None:
            ctx.maximum_version = self.max_version
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
            ctx.verify_mode = self.client_auth
            if self.client_ca_file is not None:
                ctx.load_verify_locations(cafile=str(self.client_ca_file))
        except (OSError, ssl.SSLError) as err:
            raise WebConfigError(f"{self.path}: tls_server_config: cannot load certificates: {err}") from None
        return ctx


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(f"{where}: expected a mapping")
    return value


def load_web_config(path: Path) -> WebConfig:
    """Parse and validate ``path`` (exporter-toolkit format); raises :class:`WebConfigError`."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise WebConfigError(f"{path}: cannot read web config: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise WebConfigError(f"{path}: invalid YAML: {err}") from None
    top = _mapping(raw, str(path))
    unknown = set(top) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise WebConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    base = path.parent

    def file(tls: dict[str, Any], key: str) -> Path | None:
        value = tls.get(key)
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            raise WebConfigError(f"{path}: tls_server_config.{key}: expected a file name")
        p = Path(value)
        return p if p.is_absolute() else base / p

    kw: dict[str, Any] = {}
    tls = _mapping(top.get("tls_server_config"), f"{path}: tls_server_config")
    if tls:
        bad = set(tls) & _UNSUPPORTED_TLS
        if bad:
            raise WebConfigError(f"{path}: tls_server_config.{sorted(bad)[0]} is not supported by ringtrace")
        if set(tls) - _TLS_KEYS - _UNSUPPORTED_TLS:
            raise WebConfigError(f"{path}: tls_server_config: unknown key(s) "
                                 f"{', '.join(sorted(set(tls) - _TLS_KEYS))}")
        kw["cert_file"], kw["key_file"] = file(tls, "cert_file"), file(tls, "key_file")
        if kw["cert_file"] is None or kw["key_file"] is None:
            raise WebConfigError(f"{path}: tls_server_config needs both cert_file and key_file")
        kw["client_ca_file"] = file(tls, "client_ca_file")
        auth = tls.get("client_auth_type") or "NoClientCert"
        if auth not in _CLIENT_AUTH:
            raise WebConfigError(f"{path}: tls_server_config.client_auth_type {auth!r}: expected one of "
                                 f"{', '.join(_CLIENT_AUTH)}")
        kw["client_auth"] = _CLIENT_AUTH[auth]
        if auth != "NoClientCert" and kw["client_ca_file"] is None:
            raise WebConfigError(f"{path}: tls_server_config.client_auth_type {auth} needs client_ca_file")
        for key, dest in (("min_version", "min_version"), ("max_version", "max_version")):
            value = tls.get(key)
            if value is not None:
                if value not in _TLS_VERSIONS:
                    raise WebConfigError(f"{path}: tls_server_config.{key} {value!r}: expected one of "
                                         f"{', '.join(_TLS_VERSIONS)}")
                kw[dest] = _TLS_VERSIONS[value]
    users = _mapping(top.get("basic_auth_users"), f"{path}: basic_auth_users")
    checked: dict[str, bytes] = {}
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise WebConfigError(f"{path}: basic_auth_users.{user}: expected a bcrypt hash ($2y$...)")
        checked[user] = hashed.encode()
    kw["users"] = checked
    http_cfg = _mapping(top.get("http_server_config"), f"{path}: http_server_config")
    if set(http_cfg) - {"headers", "http2"}:
        raise WebConfigError(f"{path}: http_server_config: unknown key(s) "
                             f"{', '.join(sorted(set(http_cfg) - {'headers', 'http2'}))}")
    headers = _mapping(http_cfg.get("headers"), f"{path}: http_server_config.headers")
    kw["headers"] = {str(k): str(v) for k, v in headers.items()}
    cfg = WebConfig(path, **kw)
    if cfg.tls:
        cfg.ssl_context()  # fail now, not at the first connection
    return cfg


def _mtimes(files: tuple[Path, ...]) -> tuple[float, ...]:
    out = []
    for f in files:
        try:
            out.append(os.stat(f).st_mtime)
        except OSError:
            out.append(-1.0)
    return tuple(out)


class _Auth:
    """Basic auth over bcrypt hashes, with a small cache of accepted credentials (bcrypt is slow)."""

    def __init__(self) -> None:
        self._ok: dict[bytes, None] = {}
        self._lock = threading.Lock()
        self._dummy = bcrypt.hashpw(b"ringtrace-dummy", bcrypt.gensalt(rounds=10))

    def check(self, users: dict[str, bytes], header: str | None) -> bool:
        if not users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = users.get(user)
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed or b""))).digest()
        with self._lock:
            if hashed is not None and key in self._ok:
                return True
        try:  # an unknown user still costs one bcrypt check, so timing does not reveal user names
            ok = bcrypt.checkpw(password.encode(), hashed if hashed is not None else self._dummy)
        except ValueError:
            return False
        ok = ok and hashed is not None
        if ok:
            with self._lock:
                if len(self._ok) >= AUTH_CACHE:
                    self._ok.pop(next(iter(self._ok)))
                self._ok[key] = None
        return ok


class _Settings:
    """The current web config and TLS context; re-read when a watched file changes."""

    def __init__(self, path: Path | None) -> None:
        self._lock = threading.Lock()
        self.config = load_web_config(path) if path is not None else None
        self.context = self.config.ssl_context() if self.config is not None and self.config.tls else None
        self._stamp = _mtimes(self.config.watched_files()) if self.config is not None else ()

    def current(self) -> tuple[WebConfig | None, ssl.SSLContext | None]:
        cfg = self.config
        if cfg is None:
            return None, None
        with self._lock:
            stamp = _mtimes(self.config.watched_files()) if self.config else ()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    new = load_web_config(cfg.path)
                    if new.tls != cfg.tls:
                        raise WebConfigError(f"{cfg.path}: turning TLS on or off needs a restart")
                    self.context = new.ssl_context() if new.tls else None
                    self.config = new
                    log.info("web config %s reloaded", cfg.path)
                except WebConfigError as err:
                    log.error("%s; keeping the previous web config", err)
            return self.config, self.context


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False

    def __init__(self, addr: tuple[str, int], family: socket.AddressFamily, owner: MetricsServer) -> None:
        self.address_family = family
        self.owner = owner
        super().__init__(addr, _Handler)

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        sock.settimeout(SOCKET_TIMEOUT)
        _, ctx = self.owner.settings.current()
        if ctx is not None:  # the handshake runs on the connection's own thread (in _Handler.setup)
            sock = ctx.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT
    server_version = "ringtrace"

    def setup(self) -> None:
        if isinstance(self.request, ssl.SSLSocket):
            self.request.do_handshake()
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        owner = self.server.owner
        path = self.path.split("?", 1)[0]
        cfg, _ = owner.settings.current()
        headers = cfg.headers if cfg is not None else {}
        if path == "/healthz":
            return self._send(200, b"ok\n", "text/plain; charset=utf-8", headers, head)
        if path == "/readyz":
            try:
                ready = bool(owner.ready())
            except Exception:
                log.debug("ready() failed", exc_info=True)
                ready = False
            return self._send(200 if ready else 503, b"ready\n" if ready else b"not ready\n",
                              "text/plain; charset=utf-8", headers, head)
        if cfg is not None and not owner.auth.check(cfg.users, self.headers.get("Authorization")):
            return self._send(401, b"Unauthorized\n", "text/plain; charset=utf-8",
                              {**headers, "WWW-Authenticate": 'Basic realm="ringtrace"'}, head)
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            try:
                body = encoder(owner.registry)
            except Exception as err:
                log.error("collecting metrics failed: %s", err, exc_info=log.isEnabledFor(logging.DEBUG))
                return self._send(500, f"collecting metrics failed: {err}\n".encode(), "text/plain; charset=utf-8",
                                  headers, head)
            extra = dict(headers)
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body = gzip.compress(body, compresslevel=5)
                extra["Content-Encoding"] = "gzip"
            return self._send(200, body, content_type, extra, head)
        if path == "/":
            page = (b"<html><head><title>ringtrace</title></head><body><h1>ringtrace exporter</h1>"
                    b'<p><a href="/metrics">metrics</a> <a href="/healthz">healthz</a> '
                    b'<a href="/readyz">readyz</a></p></body></html>\n')
            return self._send(200, page, "text/html; charset=utf-8", headers, head)
        return self._send(404, b"Not Found\n", "text/plain; charset=utf-8", headers, head)

    def _send(self, code: int, body: bytes, content_type: str, headers: dict[str, str], head: bool) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(body)


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
    """Serves ``registry`` on ``addr`` (port 0 picks a free port: read :attr:`port` after :meth:`start`).

    ``web_config`` is read and validated here (raises :class:`WebConfigError`); ``ready`` is
    called on every ``/readyz`` request and must be cheap and thread-safe.
    """

    def __init__(self, addr: str, registry: CollectorRegistry, ready: Callable[[], bool] = lambda: True,
                 web_config: Path | None = None) -> None:
        self.host, self._port, self.family = parse_addr(addr)
        self.registry = registry
        self.ready = ready
        self.settings = _Settings(web_config)
        self.auth = _Auth()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server is not None else self._port

    @property
    def tls(self) -> bool:
        cfg = self.settings.config
        return cfg is not None and cfg.tls

    def start(self) -> None:
        """Bind and serve on a daemon thread (raises OSError when the address is taken)."""
        self._server = _Server((self.host, self._port), self.family, self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="ringtrace-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting and close the socket; open connections end on their own timeouts."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None
