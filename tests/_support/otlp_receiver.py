"""A real OTLP trace receiver for tests and benchmarks, on 127.0.0.1 ephemeral ports.

* gRPC: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``, served by ``grpcio`` with
  the servicer generated in ``opentelemetry-proto`` (``trace_service_pb2_grpc``);
* HTTP: ``POST /v1/traces`` with an ``application/x-protobuf`` ``ExportTraceServiceRequest`` body
  (gzip/deflate ``Content-Encoding`` honoured); ``GET /stats`` answers ``{"spans", "requests",
  "refused"}`` as JSON (used by the benchmark, which runs the receiver in its own process).

Both store every accepted request (with its headers / metadata) unless ``keep=False`` (count
only).  :meth:`OtlpReceiver.stop` and :meth:`OtlpReceiver.start` take it down and up again on the
same ports (open HTTP keep-alive connections are cut too), so tests can simulate a receiver that
is down at start or restarts mid-run; :meth:`go_down_after` stops it right after it accepted
``k`` more requests, :meth:`refuse_next` answers the next requests with UNAVAILABLE / 503,
:meth:`fail_next` with any gRPC status / HTTP status (and ``Retry-After``), and :meth:`script`
plays a list of :class:`Fault` answers, one per request (a refusal, or a partial success rejecting
some spans).  :class:`Blackhole` accepts TCP connections, reads and never answers.
Waiting is on a condition with a deadline (:meth:`wait_for_spans`), never a sleep.

Run ``python -m tests._support.otlp_receiver`` to serve in a process of its own: it prints one JSON line
with the endpoints, counts only, and exits when its stdin closes.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import ssl
import sys
import threading
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

HOST = "127.0.0.1"


def value_of(v: AnyValue) -> Any:
    """An ``AnyValue`` as a Python value (arrays as tuples, kvlists as dicts)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(value_of(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return attrs_of(v.kvlist_value.values)
    return getattr(v, kind)


def attrs_of(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kv: KeyValue
    for kv in kvs:
        out[kv.key] = value_of(kv.value)
    return out


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    time: int
    attrs: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One received span, decoded; ids as hex (``parent_id`` "" for a root span)."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int
    end: int
    attrs: dict[str, Any]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    events: tuple[ReceivedEvent, ...]
    resource: dict[str, Any]
    scope: str
    kind: int
    flags: int


@dataclass(frozen=True)
class Received:
    """One accepted request."""

    protocol: str
    headers: dict[str, str]
    request: ExportTraceServiceRequest


@dataclass(frozen=True)
class Fault:
    """One request's answer: refused with ``grpc_code`` / ``http_status`` (nothing stored; ``retry_after``
    as HTTP ``Retry-After`` or a gRPC ``google.rpc.RetryInfo``), or, with ``reject`` > 0, accepted as a
    partial success that rejects that many spans."""

    grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    http_status: int = 503
    retry_after: float | None = None
    reject: int = 0


OK = Fault(grpc.StatusCode.OK, 200)


def count_spans(req: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, rx: OtlpReceiver) -> None:
        self.rx = rx

    def Export(self, request: ExportTraceServiceRequest, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        headers = {k: v if isinstance(v, str) else v.decode(errors="replace") for k, v in context.invocation_metadata()}
        fault, trip = self.rx._admit("grpc", headers, request)
        if fault is not None and not fault.reject:
            if fault.retry_after is not None:  # google.rpc.RetryInfo in the status details, as a collector sends
                delay = Duration(seconds=int(fault.retry_after), nanos=round(fault.retry_after % 1 * 1e9))
                detail = AnyMessage()
                detail.Pack(RetryInfo(retry_delay=delay))
                status = Status(code=fault.grpc_code.value[0], message="test receiver refuses", details=[detail])
                context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(fault.grpc_code, "test receiver refuses")
        if trip:  # go down once this answer is out (so it is not lost with the connection)
            context.add_callback(self.rx._stop_in_background)
        return _answer(fault)


def _answer(fault: Fault | None) -> ExportTraceServiceResponse:
    if fault is None or not fault.reject:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
        rejected_spans=fault.reject, error_message=f"test receiver rejects {fault.reject} spans"))


def _handler(rx: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # headers and body go out in two writes: without this, Nagle + delayed ACK add ~40 ms a request
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rx._track(self.connection, True)

        def finish(self) -> None:
            rx._track(self.connection, False)
            super().finish()

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: bytes, ctype: str, retry_after: float | None = None) -> None:
            self.send_response(code)
            if retry_after is not None:
                self.send_header("Retry-After", f"{retry_after:g}")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path != "/stats":
                self._reply(404, b"not found", "text/plain")
                return
            self._reply(200, json.dumps(rx.stats()).encode(), "application/json")

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self._reply(404, b"not found", "text/plain")
                return
            encoding = (self.headers.get("Content-Encoding") or "").lower()
            try:
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
            except Exception as err:
                self._reply(400, str(err).encode(), "text/plain")
                return
            headers = {k.lower(): v for k, v in self.headers.items()}
            fault, trip = rx._admit("http", headers, request)
            if fault is not None and not fault.reject:
                self._reply(fault.http_status, b"test receiver refuses", "text/plain", fault.retry_after)
                return
            self._reply(200, _answer(fault).SerializeToString(), "application/x-protobuf")
            if trip:  # the answer is out: now go down
                self.wfile.flush()
                rx._stop_in_background()

    return Handler


@dataclass(frozen=True)
class Tls:
    """Server certificate and key; with ``client_ca``, clients must present a certificate it signed."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        if self.client_ca is not None:
            ctx.load_verify_locations(self.client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


class OtlpReceiver:
    """Both servers; ``start()`` picks ports the first time and reuses them on every restart."""

    def __init__(self, *, keep: bool = True, tls: Tls | None = None) -> None:
        self.keep = keep
        self.tls = tls
        self.grpc_port = 0
        self.http_port = 0
        self._cond = threading.Condition()
        self._received: list[Received] = []
        self._spans = 0
        self._requests = 0
        self._refused = 0
        self._rejected = 0
        self._faults: deque[Fault] = deque()
        self._down_after: int | None = None
        self._up = False
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._stopper: threading.Thread | None = None
        self._conns: set[socket.socket] = set()
        self.starts = 0

    # -- endpoints ------------------------------------------------------------------------------

    @property
    def grpc_endpoint(self) -> str:
        return f"{self._scheme}://{HOST}:{self.grpc_port}"

    @property
    def _scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def http_endpoint(self) -> str:
        """The base URL (as in ``OTEL_EXPORTER_OTLP_ENDPOINT``); traces go to ``/v1/traces`` under it."""
        return f"{self._scheme}://{HOST}:{self.http_port}"

    def endpoint(self, protocol: str) -> str:
        return self.grpc_endpoint if protocol == "grpc" else self.http_endpoint

    # -- life cycle -----------------------------------------------------------------------------------

    def start(self) -> OtlpReceiver:
        self.wait_stopped()
        if self._up:
            return self
        server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-rx-grpc"),
                             options=[("grpc.so_reuseport", 0),
                                      ("grpc.max_receive_message_length", 64 << 20)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _TraceService(self), server)
        if self.tls is not None:
            t = self.tls
            creds = grpc.ssl_server_credentials([(t.key.read_bytes(), t.cert.read_bytes())],
                                                t.client_ca.read_bytes() if t.client_ca else None,
                                                require_client_auth=t.client_ca is not None)
            port = server.add_secure_port(f"{HOST}:{self.grpc_port}", creds)
        else:
            port = server.add_insecure_port(f"{HOST}:{self.grpc_port}")
        if port == 0:
            raise OSError(f"cannot bind gRPC receiver on {HOST}:{self.grpc_port}")
        self.grpc_port = port
        server.start()
        httpd = ThreadingHTTPServer((HOST, self.http_port), _handler(self))
        httpd.daemon_threads = True
        if self.tls is not None:
            httpd.socket = self.tls.server_context().wrap_socket(httpd.socket, server_side=True)
        self.http_port = httpd.server_address[1]
        thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                  name="otlp-rx-http", daemon=True)
        thread.start()
        self._grpc, self._http, self._http_thread = server, httpd, thread
        with self._cond:
            self._up = True
            self.starts += 1
        return self

    def stop(self) -> None:
        """Down: stop accepting, cut open connections, release the ports (kept for the next start)."""
        with self._cond:
            self._up = False
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait(10)
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        with self._cond:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._http_thread is not None:
            self._http_thread.join(10)
            self._http_thread = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self._stopper is not None and self._stopper.ident is not None:
            self._stopper.join()
        self.stop()

    @property
    def up(self) -> bool:
        return self._up

    # -- fault injection ---------------------------------------------------------------------------------

    def refuse_next(self, n: int) -> None:
        """Answer the next ``n`` requests with UNAVAILABLE (gRPC) / 503 (HTTP), storing nothing."""
        self.fail_next(n)

    def fail_next(self, n: int, grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, http_status: int = 503,
                  retry_after: float | None = None) -> None:
        """Answer the next ``n`` requests with ``grpc_code`` / ``http_status``, storing nothing."""
        self.script([Fault(grpc_code, http_status, retry_after)] * n)

    def script(self, faults: Iterable[Fault]) -> None:
        """Answer the next requests with ``faults`` in order (``OK`` accepts one); then accept."""
        with self._cond:
            self._faults = deque(faults)

    def go_down_after(self, k: int) -> None:
        """After ``k`` more accepted requests, refuse everything and stop (in a background thread)."""
        with self._cond:
            self._down_after = k

    def wait_stopped(self, timeout: float = 10.0) -> None:
        """Until a stop begun by :meth:`go_down_after` is complete (it may not have started yet)."""
        stopper = self._stopper
        if stopper is None:
            return
        with self._cond:
            self._cond.wait_for(lambda: stopper.ident is not None, timeout)
        stopper.join(timeout)
        self._stopper = None

    # -- the servers' side --------------------------------------------------------------------------------

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._cond:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    def _admit(self, protocol: str, headers: dict[str, str],
               request: ExportTraceServiceRequest) -> tuple[Fault | None, bool]:
        """(the fault to answer with, or None to accept; go down after answering)."""
        with self._cond:
            fault = self._faults.popleft() if self._faults else None
            if fault is OK:
                fault = None
            if not self._up or (fault is not None and not fault.reject):
                self._refused += 1
                self._cond.notify_all()
                return fault or Fault(), False
            if fault is not None:
                self._rejected += min(fault.reject, count_spans(request))
            self._requests += 1
            self._spans += count_spans(request)
            if self.keep:
                self._received.append(Received(protocol, headers, request))
            trip = False
            if self._down_after is not None:
                self._down_after -= 1
                if self._down_after <= 0:
                    self._down_after = None
                    self._up = False  # refuse from now on; the servers stop once this answer is sent
                    self._stopper = threading.Thread(target=self.stop, name="otlp-rx-stop", daemon=True)
                    trip = True
            self._cond.notify_all()
            return fault, trip

    def _stop_in_background(self) -> None:
        with self._cond:
            stopper = self._stopper
            if stopper is not None and stopper.ident is None:
                stopper.start()
            self._cond.notify_all()

    # -- what arrived ----------------------------------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        with self._cond:
            return {"spans": self._spans, "requests": self._requests, "refused": self._refused,
                    "rejected": self._rejected}

    @property
    def span_count(self) -> int:
        return self._spans

    @property
    def refused(self) -> int:
        return self._refused

    @property
    def rejected(self) -> int:
        """Spans accepted in requests answered as a partial success rejecting them."""
        return self._rejected

    def wait_for_spans(self, n: int, timeout: float = 30.0) -> bool:
        """Until at least ``n`` spans arrived; False when ``timeout`` ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: self._spans >= n, timeout)

    def received(self) -> list[Received]:
        with self._cond:
            return list(self._received)

    def clear(self) -> None:
        with self._cond:
            self._received.clear()
            self._spans = self._requests = self._refused = self._rejected = 0

    def spans(self) -> list[ReceivedSpan]:
        """Every stored span, decoded, in arrival order."""
        return list(self._iter_spans())

    def _iter_spans(self) -> Iterator[ReceivedSpan]:
        for rec in self.received():
            for rs in rec.request.resource_spans:
                resource = attrs_of(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        yield ReceivedSpan(
                            sp.trace_id.hex(), sp.span_id.hex(), sp.parent_span_id.hex(), sp.name,
                            sp.start_time_unix_nano, sp.end_time_unix_nano, attrs_of(sp.attributes),
                            sp.status.code, sp.status.message,
                            tuple(ReceivedEvent(e.name, e.time_unix_nano, attrs_of(e.attributes)) for e in sp.events),
                            resource, ss.scope.name, sp.kind, sp.flags)


class Blackhole:
    """A TCP listener on 127.0.0.1 that accepts every connection, reads what comes and never answers.

    With ``accept=False`` it never accepts either: its backlog (0) is filled by one connection of its
    own, so the kernel drops further SYNs and a client's ``connect`` hangs (a firewall that drops).
    """

    def __init__(self, *, accept: bool = True) -> None:
        self._listener = socket.create_server((HOST, 0), backlog=None if accept else 0)
        self.port = self._listener.getsockname()[1]
        self._cond = threading.Condition()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.bytes_received = 0
        self.connections = 0
        self._accepter = threading.Thread(target=self._accept, name="blackhole", daemon=True)
        if accept:
            self._accepter.start()
        else:
            self._conns.append(socket.create_connection((HOST, self.port), timeout=10))

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            t = threading.Thread(target=self._swallow, args=(conn,), name="blackhole-conn", daemon=True)
            with self._cond:
                self._conns.append(conn)
                self._threads.append(t)
                self.connections += 1
            t.start()

    def _swallow(self, conn: socket.socket) -> None:
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            with self._cond:
                self.bytes_received += len(data)
                self._cond.notify_all()

    def wait_for_bytes(self, n: int = 1, timeout: float = 30.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.bytes_received >= n, timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        self._listener.close()
        if self._accepter.ident is not None:
            self._accepter.join(10)
        with self._cond:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for t in threads:
            t.join(10)

    def __enter__(self) -> Blackhole:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    """Serve in this process (count only) until stdin closes."""
    rx = OtlpReceiver(keep=False).start()
    print(json.dumps({"grpc": rx.grpc_endpoint, "http": rx.http_endpoint}), flush=True)
    try:
        sys.stdin.read()
    finally:
        rx.stop()


if __name__ == "__main__":
    main()
