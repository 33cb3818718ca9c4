"""The metrics HTTP server over real sockets: formats, probes, TLS, basic auth, reload, robustness."""

from __future__ import annotations

import base64
import gzip
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.diagnose import Thresholds
from ringtrace.http import MetricsServer, WebConfigError, load_web_config, parse_addr
from ringtrace.layout import find_sources, source_labels
from ringtrace.records import Source
from ringtrace.run import Run
from ringtrace.sinks.prometheus import PrometheusSink
from tests._require import require

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "samples"


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
def server(sink: PrometheusSink) -> Iterator[MetricsServer]:
    srv = MetricsServer("127.0.0.1:0", sink.registry, lambda: True)
    srv.start()
    yield srv
    srv.stop()


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


def test_metrics_text_format(server: MetricsServer) -> None:
    status, headers, body = get(server.port, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"ringtrace_ring_utilization_ratio", "ringtrace_wedged_scope_info", "ringtrace_build_info"} <= names


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


def test_probes_and_other_paths(sink: PrometheusSink) -> None:
    state = {"ready": False}

    def ready() -> bool:
        if state["ready"] is None:
            raise RuntimeError("app gone")
        return bool(state["ready"])

    srv = MetricsServer("127.0.0.1:0", sink.registry, ready)
    srv.start()
    try:
        assert get(srv.port, "/healthz")[::2] == (200, b"ok\n")
        assert get(srv.port, "/readyz")[::2] == (503, b"not ready\n")
        state["ready"] = True
        assert get(srv.port, "/readyz")[::2] == (200, b"ready\n")
        state["ready"] = None  # type: ignore[assignment]
        assert get(srv.port, "/readyz")[0] == 503
        assert get(srv.port, "/nope")[0] == 404
        status, headers, body = get(srv.port, "/metrics", method="HEAD")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 1000
        assert b"/metrics" in get(srv.port, "/")[2]
    finally:
        srv.stop()


def test_stop_frees_the_port_and_busy_port_raises(sink: PrometheusSink) -> None:
    srv = MetricsServer("127.0.0.1:0", sink.registry)
    srv.start()
    port = srv.port
    assert port > 0
    clash = MetricsServer(f"127.0.0.1:{port}", sink.registry)
    with pytest.raises(OSError):
        clash.start()
    srv.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    again = MetricsServer(f"127.0.0.1:{port}", sink.registry)  # reusable at once
    again.start()
    again.stop()


def test_parse_addr() -> None:
    assert parse_addr("127.0.0.1:9464")[:2] == ("127.0.0.1", 9464)
    assert parse_addr("0.0.0.0:0")[:2] == ("0.0.0.0", 0)
    assert parse_addr("[::1]:9464") == ("::1", 9464, socket.AF_INET6)
    assert parse_addr(":9464")[:2] == ("", 9464)
    for bad in ("9464", "host:", "host:port", "h:70000"):
        with pytest.raises(ValueError, match="HOST:PORT"):
            parse_addr(bad)


def test_stalled_client_does_not_block_scrapes(server: MetricsServer) -> None:
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    stalled.sendall(b"GET /metrics HTTP/1.1\r\n")  # never finishes its request
    try:
        assert get(server.port, "/healthz")[0] == 200
        assert get(server.port, "/metrics")[0] == 200
    finally:
        stalled.close()


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


# -- web config: TLS and basic auth -------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by the openssl CLI."""
    require(shutil.which("openssl") is not None, "openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ringtrace-test-ca",
             cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _client_ctx(pki: Path, cert: bool = False) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if cert:
        ctx.load_cert_chain(pki / "client.crt", pki / "client.key")
    return ctx


def test_tls_and_basic_auth(pki: Path, tmp_path: Path, sink: PrometheusSink) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
                   f"basic_auth_users:\n  prom: '{_hash('s3cret')}'\n"
                   "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    srv = MetricsServer("127.0.0.1:0", sink.registry, lambda: True, cfg)
    srv.start()
    try:
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
    finally:
        srv.stop()


def test_stalled_tls_handshake_does_not_block(pki: Path, tmp_path: Path, sink: PrometheusSink) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n")
    srv = MetricsServer("127.0.0.1:0", sink.registry, web_config=cfg)
    srv.start()
    stalled = socket.create_connection(("127.0.0.1", srv.port), timeout=5)  # never says ClientHello
    try:
        assert get(srv.port, "/metrics", context=_client_ctx(pki))[0] == 200
    finally:
        stalled.close()
        srv.stop()


def test_client_certificates(pki: Path, tmp_path: Path, sink: PrometheusSink) -> None:
    cfg = tmp_path / "web.yml"
    # relative names are relative to the config file
    for name in ("server.crt", "server.key", "ca.crt"):
        shutil.copy(pki / name, tmp_path / name)
    cfg.write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
                   "  client_ca_file: ca.crt\n  client_auth_type: RequireAndVerifyClientCert\n"
                   "  min_version: TLS12\n")
    srv = MetricsServer("127.0.0.1:0", sink.registry, web_config=cfg)
    srv.start()
    try:
        assert get(srv.port, "/metrics", context=_client_ctx(pki, cert=True))[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(srv.port, "/metrics", context=_client_ctx(pki, cert=False))
    finally:
        srv.stop()


def test_web_config_reload(pki: Path, tmp_path: Path, sink: PrometheusSink) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  a: '{_hash('one')}'\n")
    srv = MetricsServer("127.0.0.1:0", sink.registry, web_config=cfg)
    srv.start()
    try:
        assert get(srv.port, "/metrics", _basic("a", "one"))[0] == 200
        cfg.write_text(f"basic_auth_users:\n  a: '{_hash('two')}'\n")
        st = cfg.stat()
        os.utime(cfg, (st.st_atime, st.st_mtime + 5))  # a distinct mtime even on coarse clocks
        assert get(srv.port, "/metrics", _basic("a", "one"))[0] == 401
        assert get(srv.port, "/metrics", _basic("a", "two"))[0] == 200
        cfg.write_text("basic_auth_users: [broken\n")
        os.utime(cfg, (st.st_atime, st.st_mtime + 10))
        assert get(srv.port, "/metrics", _basic("a", "two"))[0] == 200  # a broken edit keeps the old config
    finally:
        srv.stop()


@pytest.mark.parametrize(("text", "message"), [
    ("nonsense: 1\n", "unknown key"),
    ("tls_server_config:\n  cert_file: a.crt\n", "needs both cert_file and key_file"),
    ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n", "cannot load certificates"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequestClientCert\n",
     "client_auth_type"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n",
     "needs client_ca_file"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS99\n", "min_version"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_allowed_sans: [x]\n", "not supported"),
    ("basic_auth_users:\n  u: plaintext\n", "bcrypt hash"),
    ("basic_auth_users: [1, 2]\n", "expected a mapping"),
    ("http_server_config:\n  nope: 1\n", "unknown key"),
    ("a: [\n", "invalid YAML"),
])
def test_invalid_web_configs(tmp_path: Path, text: str, message: str) -> None:
    cfg = tmp_path / "web.yml"
    cfg.write_text(text)
    with pytest.raises(WebConfigError, match=message) as err:
        load_web_config(cfg)
    assert str(cfg) in str(err.value)
    with pytest.raises(WebConfigError):
        MetricsServer("127.0.0.1:0", object(), web_config=cfg)  # type: ignore[arg-type]


def test_missing_web_config(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read"):
        load_web_config(tmp_path / "absent.yml")


def test_only_accepted_credentials_are_cached(tmp_path: Path, sink: PrometheusSink) -> None:
    """bcrypt is slow by design: good credentials are remembered (bounded), bad ones never are."""
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  p: '{_hash('pw')}'\n")
    srv = MetricsServer("127.0.0.1:0", sink.registry, web_config=cfg)
    srv.start()
    try:
        for _ in range(3):
            assert get(srv.port, "/metrics", _basic("p", "bad"))[0] == 401
        assert len(srv.auth._ok) == 0
        for _ in range(3):
            assert get(srv.port, "/metrics", _basic("p", "pw"))[0] == 200
        assert len(srv.auth._ok) == 1
    finally:
        srv.stop()
