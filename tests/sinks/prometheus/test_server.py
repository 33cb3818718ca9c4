"""The metrics HTTP server over real sockets: formats, probes, TLS, basic auth, reload, hostile clients.

The server runs in an asyncio loop on a thread of its own (as in ``ringtrace watch``, where it
shares the app's loop); the tests are ordinary blocking clients on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import gzip
import http.client
import logging
import os
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import bcrypt
import msgspec
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.config import Thresholds
from ringtrace.model.records import Labels, Source
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sinks.prometheus.exposition import CHUNK
from ringtrace.sinks.prometheus.server import Files, MetricsServer, Render, parse_addr
from ringtrace.sinks.prometheus.webconfig import bcrypt_cost
from ringtrace.sources.paths import find_sources, source_labels
from ringtrace.stages.run import Run
from tests._support.prometheus import Clock, events_of
from tests._support.require import require
from tests._support.samples import PAGED, SAMPLES
from tests._support.writer import wait_for

T = TypeVar("T")


class Loop:
    """An event loop running on its own thread; ``run(coro)`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="test-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def loop() -> Iterator[Loop]:
    lp = Loop()
    yield lp
    lp.close()


@pytest.fixture
def sink() -> PrometheusSink:
    s = PrometheusSink()
    files, _ = find_sources([str(SAMPLES)])
    for f in files:
        run = Run(Source(str(f), source_labels(f)), Thresholds())
        for ev in [*run.feed(f.read_bytes()), *run.finish("eof")]:
            s.receive(ev)
    return s


@pytest.fixture
def serve(loop: Loop, sink: PrometheusSink) -> Iterator[Callable[..., MetricsServer]]:
    """``serve(**kw)``: a started MetricsServer on 127.0.0.1 (the sample sink's render unless given)."""
    started: list[MetricsServer] = []

    def make(render: Render | None = None, ready: Callable[[], bool] = lambda: True,
             web_config: Path | None = None, **kw: Any) -> MetricsServer:
        srv = MetricsServer("127.0.0.1:0", render or sink.render, ready, web_config, **kw)
        loop.run(srv.start())
        started.append(srv)
        return srv

    yield make
    for srv in started:
        loop.run(srv.stop())


@pytest.fixture
def server(serve: Callable[..., MetricsServer]) -> MetricsServer:
    return serve()


def get(port: int, path: str, headers: dict[str, str] | None = None, method: str = "GET",
        context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def closed_by_server(sock: socket.socket) -> bool:
    """Blocks until the server closes ``sock`` (True) or 10 s pass without that (False)."""
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True
    except TimeoutError:
        return False


def test_metrics_text_format(server: MetricsServer) -> None:
    status, headers, body = get(server.port, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"ringtrace_ring_occupancy_ratio", "ringtrace_run_verdict", "ringtrace_wedged_innermost_scope_info",
            "ringtrace_build_info"} <= names


def test_metrics_openmetrics_when_asked(server: MetricsServer) -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    status, headers, body = get(server.port, "/metrics", {"Accept": accept})  # what Prometheus sends
    assert status == 200
    assert headers["content-type"].startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n")
    assert "ringtrace_records_read" in {f.name for f in parse_openmetrics(text)}


def test_metrics_gzip(server: MetricsServer) -> None:
    status, headers, body = get(server.port, "/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert b"ringtrace_run_scopes" in gzip.decompress(body)
    assert "content-encoding" not in get(server.port, "/metrics")[1]


def test_a_large_exposition_is_streamed_and_compressed_in_pieces(serve: Callable[..., MetricsServer]) -> None:
    """The agent serves ``chunks``: pieces sent as they are made, or compressed one by one; the bodies are
    the sink's render, and a gzip is made again only when the exposition changed."""
    clock = Clock(0.0)
    big = PrometheusSink(clock=clock)
    data = PAGED.read_bytes()
    evs = events_of(data, Source("/t/r/scope_stats/scope_stats.jsonl"), 1 << 20)
    for i in range(600):
        src = Source(f"/t/r{i}/scope_stats/scope_stats.jsonl", Labels(run=f"r{i}"))
        for ev in evs:
            big.receive(msgspec.structs.replace(ev, source=src))
    srv = serve(render=big.chunks)
    whole, _ = big.render("")
    assert len(whole) > 2 * CHUNK and len(list(big.chunks("")[0])) > 2
    status, headers, body = get(srv.port, "/metrics")
    assert status == 200 and body == whole and headers.get("transfer-encoding") == "chunked"
    status, headers, body = get(srv.port, "/metrics", {"Accept-Encoding": "gzip"})
    assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == whole
    packed = srv._zipped
    assert get(srv.port, "/metrics", {"Accept-Encoding": "gzip"})[2] == body and srv._zipped is packed  # reused
    for ev in events_of(data, Source("/t/late/scope_stats/scope_stats.jsonl", Labels(run="late")), 1 << 20):
        big.receive(ev)
    assert b'run="late"' in gzip.decompress(get(srv.port, "/metrics", {"Accept-Encoding": "gzip"})[2])
    assert srv._zipped is not packed


def test_probes_and_other_paths(serve: Callable[..., MetricsServer]) -> None:
    state: dict[str, bool | None] = {"ready": False}

    def ready() -> bool:
        if state["ready"] is None:
            raise RuntimeError("app gone")
        return bool(state["ready"])

    srv = serve(ready=ready)
    assert get(srv.port, "/healthz")[::2] == (200, b"ok\n")
    assert get(srv.port, "/readyz")[::2] == (503, b"not ready\n")
    state["ready"] = True
    assert get(srv.port, "/readyz")[::2] == (200, b"ready\n")
    state["ready"] = None
    assert get(srv.port, "/readyz")[0] == 503
    assert get(srv.port, "/nope")[0] == 404
    status, headers, _ = get(srv.port, "/metrics", method="POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, headers, body = get(srv.port, "/metrics", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 1000
    assert b"/metrics" in get(srv.port, "/")[2]


def test_stop_frees_the_port_and_busy_port_raises(loop: Loop, sink: PrometheusSink) -> None:
    srv = MetricsServer("127.0.0.1:0", sink.render)
    loop.run(srv.start())
    port = srv.port
    assert port > 0
    clash = MetricsServer(f"127.0.0.1:{port}", sink.render)
    with pytest.raises(OSError):
        loop.run(clash.start())
    held = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # an open connection does not hold the port
    held.request("GET", "/healthz")
    assert held.getresponse().read() == b"ok\n"
    loop.run(srv.stop())
    assert held.sock is not None and closed_by_server(held.sock)
    held.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    again = MetricsServer(f"127.0.0.1:{port}", sink.render)  # reusable at once
    loop.run(again.start())
    assert get(port, "/healthz")[0] == 200
    loop.run(again.stop())


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:9464")[:2] == ("127.0.0.1", 9464)
    assert parse_addr("0.0.0.0:0")[:2] == ("0.0.0.0", 0)
    assert parse_addr("[::1]:9464") == ("::1", 9464, socket.AF_INET6)
    assert parse_addr(":9464")[:2] == ("", 9464)
    for bad in ("9464", "host:", "host:port", "h:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_addr(bad)


def test_scrapes_while_the_sink_receives(sink: PrometheusSink, server: MetricsServer) -> None:
    files, _ = find_sources([str(SAMPLES)])
    data = {f: f.read_bytes() for f in files}
    stop = threading.Event()
    errors: list[BaseException] = []

    def feed() -> None:
        try:
            gen = 1
            while not stop.is_set():
                for f, raw in data.items():
                    run = Run(Source(str(f), source_labels(f), gen), Thresholds())
                    for i in range(0, len(raw), 4096):
                        for ev in run.feed(raw[i:i + 4096]):
                            sink.receive(ev)
                    for ev in run.finish("rewritten"):
                        sink.receive(ev)
                gen += 1
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    t = threading.Thread(target=feed)
    t.start()
    try:
        for _ in range(8):
            status, _, body = get(server.port, "/metrics")
            assert status == 200
            list(text_string_to_metric_families(body.decode()))  # always a valid exposition
    finally:
        stop.set()
        t.join()
    assert not errors


# -- rendering off the loop, failures without details ----------------------------------------------


def test_a_slow_render_does_not_block_the_loop(serve: Callable[..., MetricsServer]) -> None:
    entered, release = threading.Event(), threading.Event()

    def render(accept: str) -> tuple[bytes, str]:
        entered.set()
        release.wait(20)
        return b"slow 1\n", "text/plain; version=0.0.4"

    srv = serve(render=render)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        scrape = pool.submit(get, srv.port, "/metrics")
        assert entered.wait(10)
        try:
            assert get(srv.port, "/healthz")[0] == 200  # the loop serves while the render runs
        finally:
            release.set()
        assert scrape.result(timeout=20)[::2] == (200, b"slow 1\n")


def test_no_exception_text_or_version_in_responses(serve: Callable[..., MetricsServer],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    def render(accept: str) -> tuple[bytes, str]:
        raise RuntimeError("secret-detail /var/lib/ringtrace")

    srv = serve(render=render)
    with caplog.at_level(logging.ERROR, logger="ringtrace.http"):
        status, headers, body = get(srv.port, "/metrics")
    assert status == 500 and b"secret" not in body and b"Error" in body
    assert "secret-detail" in caplog.text  # the operator's log has it
    answers = [(headers, body), get(srv.port, "/nope")[1:], get(srv.port, "/healthz")[1:]]
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw:  # aiohttp's own parser errors
        raw.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\x01: y\r\n\r\n")
        reply = b""
        while chunk := raw.recv(4096):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    answers.append(({k.lower().decode(): v.decode() for k, _, v in
                     (line.partition(b": ") for line in head.split(b"\r\n")[1:])}, body))
    for hdrs, text in answers:
        assert hdrs["server"] == "ringtrace"
        blob = (str(hdrs) + text.decode(errors="replace")).lower()
        for leak in ("aiohttp", "python", "traceback", "secret", "invalid", "bad header"):
            assert leak not in blob, (leak, hdrs, text)


# -- hostile clients: connection cap, idle and header timeouts ---------------------------------------


def _half_headers(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: te")  # never finishes its headers
        socks.append(s)
    return socks


def test_100_half_header_connections_do_not_starve_scrapes(server: MetricsServer) -> None:
    threads = threading.active_count()
    socks = _half_headers(server.port, 100)
    try:
        assert threading.active_count() < threads + 50  # no thread per connection
        status, _, body = get(server.port, "/metrics")
        assert status == 200 and b"ringtrace_build_info" in body
        assert get(server.port, "/healthz")[0] == 200
        assert server.connections <= server.max_connections
        assert server.evicted >= 100 - server.max_connections
    finally:
        for s in socks:
            s.close()


def test_half_header_tls_connections_do_not_starve_scrapes(pki: Path, tmp_path: Path,
                                                           serve: Callable[..., MetricsServer]) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n")
    srv = serve(web_config=cfg)
    stalled = [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(100)]  # no ClientHello
    try:
        assert get(srv.port, "/metrics", context=_client_ctx(pki))[0] == 200
    finally:
        for s in stalled:
            s.close()


def test_idle_connections_are_closed_after_the_connection_timeout(pki: Path, tmp_path: Path,
                                                                  serve: Callable[..., MetricsServer]) -> None:
    plain = serve(connection_timeout=0.3)
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n")
    tls = serve(web_config=cfg, connection_timeout=0.3)
    half = _half_headers(plain.port, 1)[0]
    silent = socket.create_connection(("127.0.0.1", plain.port), timeout=10)
    handshake = socket.create_connection(("127.0.0.1", tls.port), timeout=10)  # never says ClientHello
    for s in (half, silent, handshake):
        assert closed_by_server(s)
        s.close()
    wait_for(lambda: plain.connections == 0 and tls.connections == 0, what="connections released")
    conn = http.client.HTTPConnection("127.0.0.1", plain.port, timeout=10)  # a keep-alive client
    conn.request("GET", "/healthz")
    assert conn.getresponse().read() == b"ok\n"
    assert conn.sock is not None and closed_by_server(conn.sock)  # idle between requests: closed too
    conn.close()


def test_busy_connections_are_kept_and_excess_is_refused(serve: Callable[..., MetricsServer]) -> None:
    entered, release = threading.Semaphore(0), threading.Event()

    def render(accept: str) -> tuple[bytes, str]:
        entered.release()
        release.wait(20)
        return b"busy 1\n", "text/plain; version=0.0.4"

    srv = serve(render=render, max_connections=2)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        scrapes = [pool.submit(get, srv.port, "/metrics") for _ in range(2)]
        try:
            assert entered.acquire(timeout=10) and entered.acquire(timeout=10)  # both slots busy rendering
            extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
            assert closed_by_server(extra)
            extra.close()
            assert srv.refused >= 1 and srv.evicted == 0
        finally:
            release.set()
        assert [f.result(timeout=20)[0] for f in scrapes] == [200, 200]
    assert get(srv.port, "/metrics")[0] == 200  # a slot is free again


def test_a_client_that_never_reads_its_response_loses_its_slot(serve: Callable[..., MetricsServer]) -> None:
    big = os.urandom(32 << 20)  # more than the kernel's socket buffers hold

    def render(accept: str) -> tuple[bytes, str]:
        return big, "text/plain; version=0.0.4"

    srv = serve(render=render, request_timeout=0.5)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(12).startswith(b"HTTP/1.1 200")  # the response started; the client reads no more
        wait_for(lambda: srv.connections == 0, what="the stalled connection closed")
    assert get(srv.port, "/healthz")[0] == 200


# -- web config: TLS and basic auth -------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _issue(d: Path, name: str, ext: str) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, two server certificates for 127.0.0.1 and a client certificate, made by the openssl CLI."""
    require(shutil.which("openssl") is not None, "openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ringtrace-test-ca",
             cwd=d)
    for name in ("server", "renewed"):
        _issue(d, name, "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _issue(d, "client", "extendedKeyUsage=clientAuth\n")
    _openssl("req", "-x509", *ec, "-keyout", "stranger.key", "-out", "stranger.crt", "-days", "2", "-subj",
             "/CN=stranger", cwd=d)  # a client certificate no configured CA signed
    return d


def _hash(password: str, rounds: int = 4) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=rounds)).decode()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _client_ctx(pki: Path, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(pki / "client.crt", pki / "client.key")
    return ctx


def _touch(path: Path, text: str, bump: int) -> None:
    """Rewrite ``path`` with a distinct mtime even on coarse clocks."""
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 1_000_000_000))


def test_tls_and_basic_auth(pki: Path, tmp_path: Path, serve: Callable[..., MetricsServer]) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
                   f"basic_auth_users:\n  prom: '{_hash('s3cret')}'\n"
                   "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    srv = serve(web_config=cfg)
    ctx = _client_ctx(pki)
    assert srv.tls
    status, headers, _ = get(srv.port, "/metrics", context=ctx)
    assert status == 401 and headers["www-authenticate"].startswith("Basic")
    assert get(srv.port, "/metrics", _basic("prom", "wrong"), context=ctx)[0] == 401
    assert get(srv.port, "/metrics", _basic("nobody", "s3cret"), context=ctx)[0] == 401
    assert get(srv.port, "/metrics", {"Authorization": "Basic !!!"}, context=ctx)[0] == 401
    status, headers, body = get(srv.port, "/metrics", _basic("prom", "s3cret"), context=ctx)
    assert status == 200 and b"ringtrace_build_info" in body and headers["x-frame-options"] == "deny"
    assert get(srv.port, "/metrics", _basic("prom", "s3cret"), context=ctx)[0] == 200  # cached path
    assert get(srv.port, "/healthz", context=ctx)[0] == 200  # probes need no credentials
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        get(srv.port, "/healthz")  # plain HTTP on a TLS port
    with pytest.raises(ssl.SSLCertVerificationError):
        get(srv.port, "/healthz", context=ssl.create_default_context())  # untrusted issuer


def test_client_certificates(pki: Path, tmp_path: Path, serve: Callable[..., MetricsServer]) -> None:
    cfg = tmp_path / "web.yml"
    # relative names are relative to the config file
    for name in ("server.crt", "server.key", "ca.crt"):
        shutil.copy(pki / name, tmp_path / name)
    base = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  client_ca_file: ca.crt\n"
    cfg.write_text(base + "  client_auth_type: RequireAndVerifyClientCert\n  min_version: TLS12\n")
    required = serve(web_config=cfg)
    assert get(required.port, "/metrics", context=_client_ctx(pki, cert=True))[0] == 200
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(required.port, "/metrics", context=_client_ctx(pki, cert=False))
    optional_cfg = tmp_path / "optional.yml"
    optional_cfg.write_text(base + "  client_auth_type: VerifyClientCertIfGiven\n")
    optional = serve(web_config=optional_cfg)
    assert get(optional.port, "/metrics", context=_client_ctx(pki, cert=True))[0] == 200
    assert get(optional.port, "/metrics", context=_client_ctx(pki, cert=False))[0] == 200
    wrong = _client_ctx(pki)
    wrong.load_cert_chain(pki / "stranger.crt", pki / "stranger.key")  # given, so verified: refused
    with pytest.raises((ssl.SSLError, ConnectionError)):
        get(optional.port, "/metrics", context=wrong)


def _serial(port: int, ctx: ssl.SSLContext) -> str:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
    try:
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        assert isinstance(conn.sock, ssl.SSLSocket)
        cert = conn.sock.getpeercert()
        assert cert is not None
        return str(cert["serialNumber"])
    finally:
        conn.close()


def test_renewed_certificate_applies_to_new_connections(pki: Path, tmp_path: Path,
                                                        serve: Callable[..., MetricsServer]) -> None:
    for name in ("server.crt", "server.key"):
        shutil.copy(pki / name, tmp_path / name)
    cfg = tmp_path / "web.yml"
    cfg.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    srv = serve(web_config=cfg)
    ctx = _client_ctx(pki)
    before = _serial(srv.port, ctx)
    shutil.copy(pki / "renewed.key", tmp_path / "server.key")
    _touch(tmp_path / "server.crt", (pki / "renewed.crt").read_text(), 5)
    after = _serial(srv.port, ctx)
    assert before != after
    out = subprocess.run(["openssl", "x509", "-in", str(pki / "renewed.crt"), "-noout", "-serial"], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    assert after.upper() == out.strip().partition("=")[2].upper()


def test_web_config_reload(tmp_path: Path, serve: Callable[..., MetricsServer]) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  a: '{_hash('one')}'\n")
    srv = serve(web_config=cfg)
    assert get(srv.port, "/metrics", _basic("a", "one"))[0] == 200
    _touch(cfg, f"basic_auth_users:\n  a: '{_hash('two')}'\n", 5)
    assert get(srv.port, "/metrics", _basic("a", "one"))[0] == 401
    assert get(srv.port, "/metrics", _basic("a", "two"))[0] == 200
    _touch(cfg, "basic_auth_users: [broken\n", 10)
    assert get(srv.port, "/metrics", _basic("a", "two"))[0] == 200  # a broken edit keeps the old config


def test_half_written_config_keeps_authentication(pki: Path, tmp_path: Path, serve: Callable[..., MetricsServer],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    tls = f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
    hashed = _hash("pw")
    whole = tls + f"basic_auth_users:\n  prom: {hashed}\n"
    cfg = tmp_path / "web.yml"
    cfg.write_text(whole)
    srv = serve(web_config=cfg)
    ctx = _client_ctx(pki)
    assert get(srv.port, "/metrics", context=ctx)[0] == 401
    with caplog.at_level(logging.ERROR, logger="ringtrace.http"):
        for bump, partial in enumerate((tls, whole[:-20] + "\n", tls + "basic_auth_users:\n"), start=1):
            _touch(cfg, partial, bump)  # each a moment of the editor's write
            assert get(srv.port, "/metrics", context=ctx)[0] == 401, partial
            assert get(srv.port, "/metrics", _basic("prom", "pw"), context=ctx)[0] == 200
    assert "keeping the previous web config" in caplog.text and "basic_auth_users" in caplog.text
    _touch(cfg, whole.replace(hashed, _hash("new")), 9)  # the finished edit applies
    assert get(srv.port, "/metrics", _basic("prom", "new"), context=ctx)[0] == 200


def test_unknown_users_cost_as_much_as_known_ones(tmp_path: Path, serve: Callable[..., MetricsServer]) -> None:
    """The dummy hash an unknown user is checked against has the configured cost (timings not asserted)."""
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  a: '{_hash('x', rounds=5)}'\n  b: '{_hash('y', rounds=6)}'\n")
    srv = serve(web_config=cfg)
    assert bcrypt_cost(srv.auth.dummy_hash) == 6
    assert get(srv.port, "/metrics", _basic("nobody", "x"))[0] == 401
    _touch(cfg, f"basic_auth_users:\n  a: '{_hash('x', rounds=7)}'\n", 5)
    assert get(srv.port, "/metrics", _basic("a", "x"))[0] == 200
    assert bcrypt_cost(srv.auth.dummy_hash) == 7  # follows a reload


def test_only_accepted_credentials_are_cached(tmp_path: Path, serve: Callable[..., MetricsServer]) -> None:
    """bcrypt is slow by design: good credentials are remembered (bounded), bad ones never are."""
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  p: '{_hash('pw')}'\n")
    srv = serve(web_config=cfg)
    for _ in range(3):
        assert get(srv.port, "/metrics", _basic("p", "bad"))[0] == 401
    assert srv.auth.cached == 0
    for _ in range(3):
        assert get(srv.port, "/metrics", _basic("p", "pw"))[0] == 200
    assert srv.auth.cached == 1


def test_files_by_run_over_tls_need_the_same_credentials(pki: Path, tmp_path: Path,
                                                         serve: Callable[..., MetricsServer]) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
                   f"basic_auth_users:\n  prom: '{_hash('s3cret')}'\n")
    page = tmp_path / "page.html"
    page.write_bytes(b"<html>" + os.urandom(200_000).hex().encode() + b"</html>")  # more than one TLS record
    asked: list[tuple[str, str, str]] = []

    def find(run: str, rank: str, dispatch: str) -> Path | None:
        asked.append((run, rank, dispatch))
        return page if run == "a run" else None

    srv = serve(web_config=cfg, files={"report": Files(find, {"X-Extra": "1"})})
    ctx, auth = _client_ctx(pki), _basic("prom", "s3cret")
    assert get(srv.port, "/report/a+run/0/", context=ctx)[0] == 401 and asked == []
    status, headers, body = get(srv.port, "/report/a+run/0/", auth, context=ctx)
    assert (status, body, headers["x-extra"]) == (200, page.read_bytes(), "1")
    assert asked == [("a run", "0", "")]  # labels decoded as Go's urlquery encodes them
    status, _, body = get(srv.port, "/report/b/0/0", auth, context=ctx)
    assert status == 404 and body.count(b"\n") == 1
    assert get(srv.port, "/report/%2E%2E/0/0", auth, context=ctx)[0] == 400 and len(asked) == 2
    assert get(srv.port, "/trace/a+run/0/", auth, context=ctx)[0] == 404  # not a configured kind
