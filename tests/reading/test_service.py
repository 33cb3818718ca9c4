"""``ringtrace watch`` with ``--metrics-addr``: the server in the app's loop, its probes, exit codes."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests._support.samples import SAMPLES
from tests._support.writer import wait_for

pytestmark = pytest.mark.slow  # each test runs a watch process

WATCH = [sys.executable, "-m", "ringtrace", "watch"]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return -1


def _body(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return bytes(resp.read())


def test_a_taken_address_is_exit_2_naming_the_flag(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([*WATCH, str(SAMPLES), "--metrics-addr", f"127.0.0.1:{port}",
                               "--events", str(tmp_path / "ev.jsonl")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert f"--metrics-addr 127.0.0.1:{port}: " in proc.stderr and "Traceback" not in proc.stderr


def test_watch_serves_metrics_and_probes_then_stops_on_sigterm(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([*WATCH, str(SAMPLES), "--metrics-addr", f"127.0.0.1:{port}", "--idle-timeout", "60"],
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: _status(f"{base}/readyz") == 200, timeout=30, what="/readyz 200 after the first scan")
        assert _status(f"{base}/healthz") == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
            assert resp.headers["Server"] == "ringtrace"
        wait_for(lambda: b"ringtrace_run_scopes{" in _body(f"{base}/metrics"), timeout=30, what="the runs' series")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    assert "Traceback" not in proc.stderr.read()
    assert _status(f"{base}/healthz") == -1  # the port is closed with the process


def test_watch_with_otlp_shows_the_otlp_sinks_counters_on_the_metrics_page(tmp_path: Path) -> None:
    """service.py registers the OTLP sink's own collector with the Prometheus sink: the exported
    spans counted on /metrics are the spans the receiver got."""
    import re

    from tests._support.otlp_receiver import OtlpReceiver

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    exported = re.compile(rb'^ringtrace_otlp_spans_total\{outcome="exported"\} (\S+)$', re.M)
    log = tmp_path / "stderr.txt"
    with OtlpReceiver() as rx, log.open("w") as err:
        proc = subprocess.Popen([*WATCH, str(SAMPLES), "--metrics-addr", f"127.0.0.1:{port}", "--idle-timeout", "60",
                                 "--otlp-endpoint", rx.grpc_endpoint], stderr=err, text=True)
        try:
            def settled() -> bool:
                if _status(f"{base}/readyz") != 200:
                    return False
                page = _body(f"{base}/metrics")
                m = exported.search(page)
                return (m is not None and float(m.group(1)) > 0 and float(m.group(1)) == rx.span_count
                        and b"ringtrace_otlp_pending_spans 0.0" in page)

            wait_for(settled, timeout=60, what="every exported span counted on /metrics")
            page = _body(f"{base}/metrics").decode()
            assert 'ringtrace_otlp_spans_total{outcome="failed"} 0.0' in page
            assert page.count("# HELP ringtrace_otlp_spans_total") == 1
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    assert "Traceback" not in log.read_text()
