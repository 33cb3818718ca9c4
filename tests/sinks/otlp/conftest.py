"""Fixtures of the OTLP sink's tests (their helpers are in ``tests/_support/otlp.py``).

* ``rx`` — a real OTLP receiver (gRPC and HTTP/protobuf on 127.0.0.1), started for the test;
* ``pki`` (per module) — a CA, a server certificate for 127.0.0.1 and a client certificate, made by the
  openssl CLI (skips where it is not installed);
* ``big_run`` (per module) — a generated run of 101,101 paired scopes.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringtrace.demo import sim
from tests._support.otlp_receiver import OtlpReceiver


@pytest.fixture
def rx() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=otlp-test-ca")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\n"), ("client", "extendedKeyUsage=clientAuth\n")):
        (d / f"{name}.ext").write_text(ext)
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext")
    return d


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "big_run" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl"
    path.parent.mkdir(parents=True)
    sim.write_file(path, sim.Scenario(name="big", loops=(100, 10, 100), tasks=(0, 0, 1, 1),
                                      tensor_bytes=(1024, 4096)))
    return path
