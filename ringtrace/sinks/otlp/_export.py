"""Sending ready ``ExportTraceServiceRequest`` bytes over OTLP, through public transport APIs only.

* **Settings** (:func:`resolve`): the ``--otlp-endpoint``/``--otlp-protocol`` flags, then the standard
  ``OTEL_EXPORTER_OTLP_TRACES_*`` and ``OTEL_EXPORTER_OTLP_*`` variables (the signal-specific one
  wins): endpoint, headers, certificate / client key / client certificate, timeout (milliseconds,
  as the OTLP specification says), compression (``gzip`` or ``none``) and insecure.  An endpoint
  without a scheme means ``http://`` (plain text) unless ``..._INSECURE=false`` asks for TLS.  A
  value that cannot be used raises ``ValueError`` naming the variable.
* **Transports**: gRPC is a generic unary call (``Channel.unary_unary`` with no serializer: the
  bytes go out as they are); HTTP is a ``POST`` with ``Content-Type: application/x-protobuf`` on
  one kept-alive ``http.client`` connection.  ``send`` (the sink's worker) never raises: it answers
  an :class:`Attempt` (delivered, or failed and whether a retry may help, following the OTLP
  specification's retryable codes, with the receiver's ``Retry-After`` / gRPC ``RetryInfo``).
  ``abort`` (any thread) cuts a request in flight and fails every later one: shutdown.
* The one retry layer is the sink's, following :class:`RetryPolicy`.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import math
import os
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from http.client import HTTPConnection, HTTPException
from typing import Literal, NamedTuple, Protocol
from urllib.parse import unquote, urlsplit

import grpc
import msgspec
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.protobuf.empty_pb2 import Empty
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

OtlpProtocol = Literal["grpc", "http/protobuf"]
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
DEFAULT_TIMEOUT = 10.0

# OTLP specification, "Failures": what a client may retry
RETRYABLE_GRPC = frozenset({grpc.StatusCode.CANCELLED, grpc.StatusCode.DEADLINE_EXCEEDED,
                            grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED,
                            grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS})
RETRYABLE_HTTP = frozenset({408, 429, 502, 503, 504})


class ExportSettings(msgspec.Struct, frozen=True):
    """Where and how spans go.  ``url`` is the full traces URL (HTTP) or ``scheme://host:port`` (gRPC)."""

    protocol: OtlpProtocol
    url: str
    tls: bool
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = DEFAULT_TIMEOUT
    compression: Literal["gzip", "none"] = "none"
    certificate: str | None = None
    client_key: str | None = None
    client_certificate: str | None = None

    @property
    def target(self) -> str:
        """``host:port`` (the gRPC channel target)."""
        return urlsplit(self.url).netloc


class RetryPolicy(msgspec.Struct, frozen=True):
    """A retryable failure is retried after ``first_delay`` x a jitter factor in [1 - jitter, 1 + jitter],
    the delay doubling up to ``max_delay``; at most ``attempts`` tries, and no retry (nor any wait) past
    ``max_elapsed`` seconds after the first try.  A receiver's ``Retry-After`` lengthens a delay."""

    attempts: int = 10
    first_delay: float = 0.5
    max_delay: float = 4.0
    max_elapsed: float = 10.0
    jitter: float = 0.2


def http_traces_url(endpoint: str) -> str:
    """``--otlp-endpoint`` is a base URL like ``OTEL_EXPORTER_OTLP_ENDPOINT``: ``/v1/traces`` is added
    when it has no path; a URL with a path is used as given."""
    return endpoint.rstrip("/") + "/v1/traces" if urlsplit(endpoint).path in ("", "/") else endpoint


def parse_headers(value: str, name: str) -> tuple[tuple[str, str], ...]:
    """``k1=v1,k2=v2`` with percent-encoded values (the W3C baggage format the specification uses);
    keys lower-cased (gRPC metadata must be)."""
    out = []
    for item in filter(str.strip, value.split(",")):
        key, eq, val = item.partition("=")
        key = unquote(key).strip().lower()
        if not eq or not key:
            raise ValueError(f"{name}: expected key=value pairs separated by commas, got {item.strip()!r}")
        out.append((key, unquote(val).strip()))
    return tuple(out)


def resolve(endpoint: str | None, protocol: str, timeout: float | None,
            env: Mapping[str, str]) -> ExportSettings:
    """The settings for ``protocol``: the flag's ``endpoint`` first, else the environment (see the module doc)."""
    if protocol not in ("grpc", "http/protobuf"):
        raise ValueError(f"unknown OTLP protocol {protocol!r} (expected grpc or http/protobuf)")
    http = protocol == "http/protobuf"

    def get(key: str) -> tuple[str, str] | None:
        for name in (f"OTEL_EXPORTER_OTLP_TRACES_{key}", f"OTEL_EXPORTER_OTLP_{key}"):
            if env.get(name, "").strip():
                return name, env[name].strip()
        return None

    def choice(key: str, a: str, b: str) -> str | None:
        got = get(key)
        if got is not None and got[1].lower() not in (a, b):
            raise ValueError(f"{got[0]}: expected {a} or {b}, got {got[1]!r}")
        return None if got is None else got[1].lower()

    insecure = choice("INSECURE", "true", "false")
    signal = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if endpoint:
        source, url = "--otlp-endpoint", endpoint
    elif signal:  # the signal's URL is used as given
        source, url = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", signal
    elif base:
        source, url = "OTEL_EXPORTER_OTLP_ENDPOINT", base
    else:
        source, url = "the default", "http://localhost:4318/v1/traces" if http else "http://localhost:4317"
    if "://" not in url:
        url = ("https://" if insecure == "false" else "http://") + url
    if http and source == "--otlp-endpoint":
        url = http_traces_url(url)
    elif http and source == "OTEL_EXPORTER_OTLP_ENDPOINT":
        url = url.rstrip("/") + "/v1/traces"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{source}: {url!r}: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{source}: {url!r} is not an http:// or https:// URL with a host")
    if not http:
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        url = f"{parts.scheme}://{host}:{port or (443 if parts.scheme == 'https' else 4317)}"

    if timeout is None and (t := get("TIMEOUT")) is not None:
        try:
            timeout = float(t[1]) / 1000.0
        except ValueError:
            timeout = math.nan
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"{t[0]}: expected a positive number of milliseconds, got {t[1]!r}")
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"OTLP timeout must be a positive number of seconds, got {timeout!r}")
    compression: Literal["gzip", "none"] = "gzip" if choice("COMPRESSION", "gzip", "none") == "gzip" else "none"
    headers = get("HEADERS")
    cert, key, client_cert = (v[1] if (v := get(k)) else None for k in ("CERTIFICATE", "CLIENT_KEY",
                                                                        "CLIENT_CERTIFICATE"))
    return ExportSettings("http/protobuf" if http else "grpc", url, parts.scheme == "https",
                          parse_headers(headers[1], headers[0]) if headers else (), timeout, compression,
                          cert, key, client_cert)


# -- transports ---------------------------------------------------------------------------------------


class Attempt(NamedTuple):
    """One request's answer.  ``rejected``: spans the receiver refused in a partial success."""

    ok: bool
    retryable: bool = False
    reason: str = ""
    rejected: int = 0
    retry_after: float | None = None


SHUTTING_DOWN = Attempt(False, reason="shutting down")


def _partial(body: bytes) -> Attempt:
    try:
        resp = ExportTraceServiceResponse.FromString(body)
    except DecodeError:
        return Attempt(True)  # delivered; an unreadable answer body says nothing about rejections
    rejected = resp.partial_success.rejected_spans
    return Attempt(True, reason=resp.partial_success.error_message, rejected=max(0, rejected))


def _fields(message: bytes, number: int) -> list[bytes]:
    """The length-delimited fields ``number`` of a protobuf message, read as an ``Empty`` (whose
    fields are all unknown ones)."""
    got = UnknownFieldSet(Empty.FromString(message))
    return [f.data for f in (got[i] for i in range(len(got))) if f.field_number == number and f.wire_type == 2]


def grpc_retry_delay(status_details: bytes) -> float | None:
    """The ``google.rpc.RetryInfo`` delay in a ``grpc-status-details-bin`` trailer (a ``google.rpc.Status``),
    which the OTLP specification asks clients to honour."""
    try:
        for detail in _fields(status_details, 3):  # Status.details: Any
            anything = AnyMessage.FromString(detail)
            if anything.type_url == "type.googleapis.com/google.rpc.RetryInfo":
                delay = Duration.FromString(b"".join(_fields(anything.value, 1)))  # RetryInfo.retry_delay
                return max(0.0, delay.seconds + delay.nanos / 1e9)
    except DecodeError:  # not a Status: no delay
        return None
    return None


class Transport(Protocol):
    def send(self, payload: bytes, timeout: float) -> Attempt: ...

    def abort(self) -> None: ...


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ValueError(f"OTEL_EXPORTER_OTLP_{what}: cannot read {path}: {err.strerror or err}") from None


class GrpcTransport:
    """``TraceService/Export`` as a generic unary call: ready bytes in, response bytes out.

    After UNAVAILABLE the channel is made anew, so a receiver that is back is reached on the next
    try (a channel that failed to connect waits out its own reconnect backoff first).
    """

    def __init__(self, s: ExportSettings, user_agent: str) -> None:
        self._options = [("grpc.primary_user_agent", user_agent), ("grpc.use_local_subchannel_pool", 1)]
        self._compression = grpc.Compression.Gzip if s.compression == "gzip" else grpc.Compression.NoCompression
        self._target = s.target
        self._creds = (grpc.ssl_channel_credentials(_read(s.certificate, "CERTIFICATE"),
                                                    _read(s.client_key, "CLIENT_KEY"),
                                                    _read(s.client_certificate, "CLIENT_CERTIFICATE"))
                       if s.tls else None)
        self._metadata = s.headers
        self._lock = threading.Lock()
        self._aborted = False
        self._open()

    def _open(self) -> None:
        self.channel = (grpc.secure_channel(self._target, self._creds, self._options, self._compression)
                        if self._creds is not None else grpc.insecure_channel(self._target, self._options,
                                                                             self._compression))
        self._call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            EXPORT_METHOD, request_serializer=None, response_deserializer=None)

    def send(self, payload: bytes, timeout: float) -> Attempt:
        if self._aborted:
            return SHUTTING_DOWN
        try:
            answer = self._call(payload, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            if self._aborted:
                return SHUTTING_DOWN
            if not isinstance(err, grpc.Call):
                return Attempt(False, False, f"UNKNOWN: {err}")
            code = err.code()
            if code == grpc.StatusCode.UNAVAILABLE:
                with self._lock:
                    if not self._aborted:
                        self.channel.close()
                        self._open()
            detail = next((v for k, v in err.trailing_metadata() or () if k == "grpc-status-details-bin"), None)
            return Attempt(False, code in RETRYABLE_GRPC, f"{code.name}: {err.details()}",
                           retry_after=grpc_retry_delay(detail) if isinstance(detail, bytes) else None)
        except Exception as err:  # grpc raises ValueError on a closed channel
            return Attempt(False, not self._aborted, f"{type(err).__name__}: {err}")
        return _partial(answer) if isinstance(answer, bytes) else Attempt(True)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            self.channel.close()  # cancels a call in flight


class HttpTransport:
    """``POST`` on one kept-alive connection; a reused connection the server closed is reopened once."""

    def __init__(self, s: ExportSettings, user_agent: str) -> None:
        parts = urlsplit(s.url)
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if s.tls else 80)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._ctx: ssl.SSLContext | None = None
        if s.tls:
            try:
                self._ctx = ssl.create_default_context(cafile=s.certificate)
            except (OSError, ssl.SSLError) as err:
                raise ValueError(f"OTEL_EXPORTER_OTLP_CERTIFICATE: {s.certificate}: {err}") from None
            if s.client_certificate:
                try:
                    self._ctx.load_cert_chain(s.client_certificate, s.client_key)
                except (OSError, ssl.SSLError) as err:
                    raise ValueError(f"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE / _CLIENT_KEY: {err}") from None
        self._headers = {"Content-Type": "application/x-protobuf", "User-Agent": user_agent, **dict(s.headers)}
        self._gzip = s.compression == "gzip"
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._conn: HTTPConnection | None = None
        self._raw: socket.socket | None = None  # the TCP socket under ``_conn`` (or being handed to it)
        self._wake_r, self._wake_w = socket.socketpair()  # abort writes: a connect in progress ends
        self._lock = threading.Lock()
        self._aborted = False

    def _connect(self, timeout: float) -> HTTPConnection:
        with self._lock:
            if self._aborted:
                raise ConnectionAbortedError("shutting down")
        raw = _connect_or_wake(self._host, self._port, timeout, self._wake_r)
        with self._lock:
            self._raw = raw
            if self._aborted:
                raise ConnectionAbortedError("shutting down")
        sock: socket.socket = raw
        if self._ctx is not None:  # the handshake reads: abort's shutdown of the raw socket wakes it
            sock = self._ctx.wrap_socket(raw, server_hostname=self._host)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connected(self._host, self._port, timeout, sock)
        with self._lock:
            self._conn = conn
        return conn

    def _drop(self) -> None:
        with self._lock:
            conn, self._conn, raw, self._raw = self._conn, None, self._raw, None
        if conn is not None:
            conn.close()
        elif raw is not None:
            raw.close()

    def send(self, payload: bytes, timeout: float) -> Attempt:
        body = gzip.compress(payload, compresslevel=5) if self._gzip else payload
        kept = self._conn
        for reused in (kept is not None and kept.sock is not None, False):
            try:
                conn = kept if reused and kept is not None else self._connect(timeout)
                conn.sock.settimeout(timeout)
                conn.request("POST", self._path, body, self._headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, HTTPException) as err:
                self._drop()
                if self._aborted:
                    return SHUTTING_DOWN
                if reused and not isinstance(err, TimeoutError):
                    continue  # the kept-alive connection had gone stale: once more on a fresh one
                return Attempt(False, True, f"{type(err).__name__}: {err}")
            if resp.will_close:
                self._drop()
            if 200 <= resp.status < 300:
                return _partial(data)
            text = data[:200].decode(errors="replace").strip()
            after = resp.getheader("Retry-After")
            try:  # seconds; an HTTP date is not worth a parser: the backoff applies
                retry_after = max(0.0, float(after)) if after else None
            except ValueError:
                retry_after = None
            return Attempt(False, resp.status in RETRYABLE_HTTP, f"HTTP {resp.status} {resp.reason}: {text}",
                           retry_after=retry_after)
        raise AssertionError("unreachable")

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            raw = self._raw
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")  # wakes a connect in progress (and fails every later one)
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)  # wakes a read blocked in the worker (a TLS handshake too)


class _Connected(HTTPConnection):
    """An ``http.client`` connection over a socket connected (and TLS-wrapped) beforehand."""

    def __init__(self, host: str, port: int, timeout: float, sock: socket.socket) -> None:
        super().__init__(host, port, timeout=timeout)
        self.sock = sock

    def connect(self) -> None:
        """Never reconnects by itself: the transport opens a fresh connection (see ``send``)."""
        raise ConnectionResetError("the connection was closed")


def _connect_or_wake(host: str, port: int, timeout: float, wake: socket.socket) -> socket.socket:
    """A TCP socket connected to ``host:port`` within ``timeout`` (blocking, with that timeout, when it
    returns), trying each address in turn; ``ConnectionAbortedError`` as soon as ``wake`` is readable:
    a connect whose SYNs are dropped would otherwise hold the worker for the whole timeout."""
    until = time.monotonic() + timeout
    last: OSError = OSError(f"{host}: no address")
    for family, kind, proto, _, addr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            code = sock.connect_ex(addr)
            if code in (errno.EINPROGRESS, errno.EAGAIN):
                with selectors.DefaultSelector() as sel:
                    sel.register(wake, selectors.EVENT_READ)
                    sel.register(sock, selectors.EVENT_WRITE)
                    ready = {key.fileobj for key, _ in sel.select(max(0.0, until - time.monotonic()))}
                if wake in ready:
                    raise ConnectionAbortedError("shutting down")
                if sock not in ready:
                    raise TimeoutError("timed out connecting")
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                raise OSError(code, os.strerror(code))
            sock.settimeout(max(0.001, until - time.monotonic()))
            return sock
        except ConnectionAbortedError:
            sock.close()
            raise
        except OSError as err:
            sock.close()
            last = err
            if isinstance(err, TimeoutError):
                break
    raise last
