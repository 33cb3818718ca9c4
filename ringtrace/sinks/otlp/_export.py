"""Sending ready ``ExportTraceServiceRequest`` bytes over OTLP, through public transport APIs only.

* **Settings** (:func:`resolve`): the ``--otlp-endpoint``/``--otlp-protocol`` flags, then the standard
  ``OTEL_EXPORTER_OTLP_TRACES_*`` and ``OTEL_EXPORTER_OTLP_*`` variables (the signal-specific one
  wins): endpoint, headers, certificate / client key / client certificate, timeout (milliseconds,
  as the OTLP specification says), compression (``gzip`` or ``none``) and insecure.  An endpoint
  without a scheme means ``http://`` (plain text) unless ``..._INSECURE=false`` asks for TLS.  A
  value that cannot be used raises ``ValueError`` naming the variable.
* **Transports**: gRPC is a generic unary call (``Channel.unary_unary`` with no serializer: the
  bytes go out as they are) on a ``grpc`` channel; HTTP is a ``POST`` with ``Content-Type:
  application/x-protobuf`` on one kept-alive ``http.client`` connection.  ``send`` never raises:
  it answers an :class:`Attempt` (delivered, or failed and whether a retry may help, following
  the OTLP specification's retryable codes, with the receiver's ``Retry-After`` / gRPC ``RetryInfo``).
  ``abort`` cuts a request in flight (shutdown).
* **The one retry layer** (:class:`Exporter`): exponential backoff with jitter, capped per batch
  (``RetryPolicy.max_elapsed``) and never past the caller's deadline; non-retryable answers fail
  at once.  Injectable ``clock``/``sleep``/``uniform`` make it testable without waiting.
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import math
import socket
import ssl
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from typing import Literal, NamedTuple, Protocol
from urllib.parse import unquote, urlsplit

import grpc
import msgspec
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

log = logging.getLogger("ringtrace.sinks.otlp")

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


def http_traces_url(endpoint: str) -> str:
    """``--otlp-endpoint`` is a base URL like ``OTEL_EXPORTER_OTLP_ENDPOINT``: ``/v1/traces`` is added
    when it has no path; a URL with a path is used as given."""
    return endpoint.rstrip("/") + "/v1/traces" if urlsplit(endpoint).path in ("", "/") else endpoint


def parse_headers(value: str, name: str) -> tuple[tuple[str, str], ...]:
    """``k1=v1,k2=v2`` with percent-encoded values (the W3C baggage format the specification uses);
    keys lower-cased (gRPC metadata must be)."""
    out = []
    for item in value.split(","):
        if not item.strip():
            continue
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

    def get(key: str) -> tuple[str, str] | None:
        for name in (f"OTEL_EXPORTER_OTLP_TRACES_{key}", f"OTEL_EXPORTER_OTLP_{key}"):
            if env.get(name, "").strip():
                return name, env[name].strip()
        return None

    insecure = get("INSECURE")
    if insecure is not None and insecure[1].lower() not in ("true", "false"):
        raise ValueError(f"{insecure[0]}: expected true or false, got {insecure[1]!r}")
    plain_scheme = "https://" if insecure is not None and insecure[1].lower() == "false" else "http://"
    source = "--otlp-endpoint"
    if endpoint:
        url = endpoint if "://" in endpoint else plain_scheme + endpoint
        if protocol == "http/protobuf":
            url = http_traces_url(url)
    elif (signal := env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()):
        source = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
        url = signal if "://" in signal else plain_scheme + signal  # the signal's URL is used as given
    elif (base := env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()):
        source = "OTEL_EXPORTER_OTLP_ENDPOINT"
        url = base if "://" in base else plain_scheme + base
        if protocol == "http/protobuf":
            url = url.rstrip("/") + "/v1/traces"
    else:
        url = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318/v1/traces"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as err:
        raise ValueError(f"{source}: {url!r}: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{source}: {url!r} is not an http:// or https:// URL with a host")
    if protocol == "grpc":
        url = f"{parts.scheme}://{parts.hostname if ':' not in parts.hostname else f'[{parts.hostname}]'}" \
              f":{port or (443 if parts.scheme == 'https' else 4317)}"

    if timeout is None and (t := get("TIMEOUT")) is not None:
        try:
            timeout = float(t[1]) / 1000.0
        except ValueError:
            raise ValueError(f"{t[0]}: expected milliseconds, got {t[1]!r}") from None
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"{t[0]}: expected a positive number of milliseconds, got {t[1]!r}")
    timeout = DEFAULT_TIMEOUT if timeout is None else timeout
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"OTLP timeout must be a positive number of seconds, got {timeout!r}")
    compression: Literal["gzip", "none"] = "none"
    if (c := get("COMPRESSION")) is not None:
        if c[1].lower() not in ("gzip", "none"):
            raise ValueError(f"{c[0]}: expected gzip or none, got {c[1]!r}")
        compression = "gzip" if c[1].lower() == "gzip" else "none"
    headers = get("HEADERS")
    files = {k: (v[1] if (v := get(k)) is not None else None)
             for k in ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")}
    proto: OtlpProtocol = "grpc" if protocol == "grpc" else "http/protobuf"
    return ExportSettings(proto, url, parts.scheme == "https",
                          parse_headers(headers[1], headers[0]) if headers else (), timeout, compression,
                          files["CERTIFICATE"], files["CLIENT_KEY"], files["CLIENT_CERTIFICATE"])


def _read(path: str | None, what: str) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise ValueError(f"OTEL_EXPORTER_OTLP_{what}: cannot read {path}: {err.strerror or err}") from None


# -- transports ---------------------------------------------------------------------------------------


class Attempt(NamedTuple):
    """One request's answer.  ``rejected``: spans the receiver refused in a partial success."""

    ok: bool
    retryable: bool = False
    reason: str = ""
    rejected: int = 0
    retry_after: float | None = None


def _partial(body: bytes) -> Attempt:
    try:
        resp = ExportTraceServiceResponse.FromString(body)
    except DecodeError:
        return Attempt(True)  # delivered; an unreadable answer body says nothing about rejections
    rejected = resp.partial_success.rejected_spans
    return Attempt(True, reason=resp.partial_success.error_message, rejected=max(0, rejected))


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of a protobuf message: varints as ints, length-delimited as bytes."""
    i, n = 0, len(buf)

    def varint() -> int:
        nonlocal i
        out = shift = 0
        while True:
            b = buf[i]
            i += 1
            out |= (b & 0x7F) << shift
            if b < 0x80:
                return out
            shift += 7

    while i < n:
        key = varint()
        wire = key & 7
        if wire == 0:
            yield key >> 3, varint()
        elif wire == 2:
            size = varint()
            yield key >> 3, buf[i:i + size]
            i += size
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire}")


def grpc_retry_delay(status_details: bytes) -> float | None:
    """The ``google.rpc.RetryInfo`` delay in a ``grpc-status-details-bin`` trailer (a ``google.rpc.Status``
    whose ``details`` are ``Any`` messages), which the OTLP specification asks clients to honour."""

    def sub(fields: dict[int, int | bytes], num: int) -> bytes:
        v = fields.get(num, b"")
        return v if isinstance(v, bytes) else b""

    try:
        for num, detail in _fields(status_details):
            if num != 3 or not isinstance(detail, bytes):
                continue
            anything = dict(_fields(detail))
            if sub(anything, 1) != b"type.googleapis.com/google.rpc.RetryInfo":
                continue
            delay = dict(_fields(sub(dict(_fields(sub(anything, 2))), 1)))
            seconds, nanos = delay.get(1, 0), delay.get(2, 0)
            if isinstance(seconds, int) and isinstance(nanos, int):
                return max(0.0, seconds + nanos / 1e9)
    except (IndexError, ValueError):  # not a Status: no delay
        return None
    return None


class Transport(Protocol):
    def send(self, payload: bytes, timeout: float) -> Attempt: ...

    def abort(self) -> None: ...


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
        if self._creds is not None:
            self.channel = grpc.secure_channel(self._target, self._creds, self._options, self._compression)
        else:
            self.channel = grpc.insecure_channel(self._target, self._options, self._compression)
        self._call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = self.channel.unary_unary(
            EXPORT_METHOD, request_serializer=None, response_deserializer=None)

    def send(self, payload: bytes, timeout: float) -> Attempt:
        if self._aborted:
            return Attempt(False, reason="shutting down")
        try:
            answer = self._call(payload, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            if self._aborted:
                return Attempt(False, reason="shutting down")
            code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            if code == grpc.StatusCode.UNAVAILABLE:
                with self._lock:
                    if not self._aborted:
                        self.channel.close()
                        self._open()
            trailers: Iterable[tuple[str, str | bytes]] = (
                (err.trailing_metadata() or ()) if isinstance(err, grpc.Call) else ())
            detail = next((v for k, v in trailers if k == "grpc-status-details-bin"), None)
            return Attempt(False, code in RETRYABLE_GRPC, f"{code.name}: {details}",
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
        self._lock = threading.Lock()
        self._aborted = False

    def _connect(self, timeout: float) -> HTTPConnection:
        conn = (HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ctx) if self._ctx is not None
                else HTTPConnection(self._host, self._port, timeout=timeout))
        with self._lock:
            if self._aborted:
                raise ConnectionAbortedError("shutting down")
            self._conn = conn
        conn.connect()  # outside the lock: abort never waits for a slow connect (bounded by ``timeout``)
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _drop(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

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
                    return Attempt(False, reason="shutting down")
                if reused and not isinstance(err, TimeoutError):
                    continue  # the kept-alive connection had gone stale: once more on a fresh one
                return Attempt(False, True, f"{type(err).__name__}: {err}")
            if resp.will_close:
                self._drop()
            if 200 <= resp.status < 300:
                return _partial(data)
            text = data[:200].decode(errors="replace").strip()
            return Attempt(False, resp.status in RETRYABLE_HTTP, f"HTTP {resp.status} {resp.reason}: {text}",
                           retry_after=_retry_after(resp.getheader("Retry-After")))
        raise AssertionError("unreachable")

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes a read blocked in the worker


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:  # an HTTP date: not worth a parser, the backoff applies
        return None


def make_transport(s: ExportSettings, user_agent: str) -> Transport:
    return GrpcTransport(s, user_agent) if s.protocol == "grpc" else HttpTransport(s, user_agent)


# -- the retry layer --------------------------------------------------------------------------------------


class RetryPolicy(msgspec.Struct, frozen=True):
    """A retryable failure is retried after ``first_delay`` x a jitter factor in [1 - jitter, 1 + jitter],
    the delay doubling up to ``max_delay``; at most ``attempts`` tries, and no retry (nor any wait) past
    ``max_elapsed`` seconds after the first try.  A receiver's ``Retry-After`` lengthens a delay."""

    attempts: int = 10
    first_delay: float = 0.5
    max_delay: float = 4.0
    max_elapsed: float = 10.0
    jitter: float = 0.2


class Delivery(NamedTuple):
    """One batch's fate: ``delivered`` of ``n`` spans; the rest failed (``reason``)."""

    delivered: int
    reason: str = ""


class Exporter:
    """Sends one batch at a time with :class:`RetryPolicy`.  ``requests``/``retries`` count attempts."""

    def __init__(self, transport: Transport, policy: RetryPolicy, timeout: float, *,
                 clock: Callable[[], float], sleep: Callable[[float], object],
                 uniform: Callable[[float, float], float]) -> None:
        self.transport = transport
        self.policy = policy
        self.timeout = timeout
        self._clock = clock
        self._sleep = sleep
        self._uniform = uniform
        self.requests = 0
        self.retries = 0

    def export(self, payload: bytes, n: int, time_left: Callable[[], float]) -> Delivery:
        """Deliver ``payload`` (``n`` spans).  ``time_left()``: seconds until the caller's deadline
        (``inf`` for none, <= 0 once it passed or the sink stops); no try or wait goes past it."""
        p = self.policy
        started = self._clock()
        delay = p.first_delay
        attempt = 0
        while True:
            budget = min(p.max_elapsed - (self._clock() - started), time_left())
            if budget <= 0:
                return Delivery(0, "out of time" if attempt else "shutting down")
            attempt += 1
            self.requests += 1
            try:
                got = self.transport.send(payload, min(self.timeout, budget))
            except Exception as err:  # a transport bug must not kill the worker
                got = Attempt(False, True, f"{type(err).__name__}: {err}")
            if not got.ok and time_left() <= 0:
                return Delivery(0, "shutting down")  # cut at the deadline: the sink's closing line says it
            if got.ok:
                if got.rejected:
                    log.warning("otlp: the receiver rejected %d of %d spans: %s", got.rejected, n, got.reason)
                return Delivery(max(0, n - got.rejected), got.reason)
            if not got.retryable:
                log.warning("otlp: %d spans refused, not retried: %s", n, got.reason)
                return Delivery(0, got.reason)
            wait = delay * self._uniform(1 - p.jitter, 1 + p.jitter) if p.jitter else delay
            wait = max(wait, got.retry_after or 0.0)
            elapsed = self._clock() - started
            if attempt >= p.attempts or elapsed + wait > p.max_elapsed or wait >= time_left():
                log.warning("otlp: %d spans failed after %d attempt(s) in %.1fs: %s", n, attempt, elapsed,
                            got.reason)
                return Delivery(0, got.reason)
            log.info("otlp: export of %d spans failed (attempt %d: %s), retrying in %.2fs", n, attempt,
                     got.reason, wait)
            self.retries += 1
            self._sleep(wait)
            delay = min(delay * 2, p.max_delay)
