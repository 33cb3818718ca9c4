"""The exporter-toolkit web config: validation, reloads that never weaken it, basic auth."""

from __future__ import annotations

import base64
import logging
import ssl
from dataclasses import replace
from pathlib import Path

import bcrypt
import pytest

from ringtrace.sinks.prometheus.server import MetricsServer
from ringtrace.sinks.prometheus.webconfig import (
    BasicAuth,
    WebConfig,
    WebConfigError,
    WebSettings,
    bcrypt_cost,
    load_web_config,
    weaker,
)

HASH4 = bcrypt.hashpw(b"pw", b"$2b$04$" + b"ringtraceFixedSalt123.").decode()  # a fixed salt: test ids must not vary


def _render(accept: str) -> tuple[bytes, str]:
    return b"", "text/plain"


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
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  colour: red\n", "unknown key"),
    ("basic_auth_users:\n  u: plaintext\n", "bcrypt hash"),
    (f"basic_auth_users:\n  u: {HASH4[:-1]}\n", "whole bcrypt hash"),  # cut by a half-finished write
    (f"basic_auth_users:\n  u: '{HASH4}x'\n", "whole bcrypt hash"),
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
        MetricsServer("127.0.0.1:0", _render, web_config=cfg)


def test_missing_and_non_utf8_web_config(tmp_path: Path) -> None:
    with pytest.raises(WebConfigError, match="cannot read"):
        load_web_config(tmp_path / "absent.yml")
    (tmp_path / "bad.yml").write_bytes(b"basic_auth_users:\n  \xff: x\n")
    with pytest.raises(WebConfigError, match="not UTF-8"):
        load_web_config(tmp_path / "bad.yml")


def test_whole_hashes_of_every_variant_load(tmp_path: Path) -> None:
    cfg = tmp_path / "web.yml"
    variants = {p: p + HASH4[4:] for p in ("$2a$", "$2b$", "$2y$")}
    cfg.write_text("basic_auth_users:\n" + "".join(f"  u{i}: '{h}'\n" for i, h in enumerate(variants.values())))
    assert sorted(load_web_config(cfg).users.values()) == sorted(h.encode() for h in variants.values())


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_basic_auth_dummy_hash_has_the_configured_cost() -> None:
    users = {"a": bcrypt.hashpw(b"x", bcrypt.gensalt(rounds=5)), "b": bcrypt.hashpw(b"y", bcrypt.gensalt(rounds=7))}
    auth = BasicAuth(users)
    assert bcrypt_cost(auth.dummy_hash) == 7 == max(map(bcrypt_cost, users.values()))
    assert auth.check(_basic("a", "x")) and auth.check(_basic("b", "y"))
    assert not auth.check(_basic("a", "y")) and not auth.check(_basic("ghost", "x"))
    assert not auth.check("Basic !!!") and not auth.check(None) and not auth.check("Bearer x")
    assert auth.known(_basic("a", "x")) and not auth.known(_basic("ghost", "x"))
    assert BasicAuth({}).check(None)  # no users: no authentication


def test_reload_refuses_a_weaker_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A reload never drops basic auth (a half-written file looks like that); a stronger edit applies."""
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  a: '{HASH4}'\n")
    settings = WebSettings(cfg)
    first = settings.active
    assert not settings.changed()
    cfg.write_text("http_server_config:\n  headers:\n    X-A: b\n")
    assert settings.changed()
    with caplog.at_level(logging.ERROR, logger="ringtrace.http"):
        settings.reload()
    assert settings.active is first and "removing basic auth needs a restart" in caplog.text
    assert not settings.changed()  # the refused version is not re-read until the file changes again
    other = bcrypt.hashpw(b"pw2", bcrypt.gensalt(rounds=4)).decode()
    cfg.write_text(f"basic_auth_users:\n  a: '{HASH4}'\n  b: '{other}'\n")
    settings.reload()
    assert settings.active is not first and set(settings.active.auth.users) == {"a", "b"}


def test_weaker_client_certificate_checks_need_a_restart(tmp_path: Path) -> None:
    crt = tmp_path / "a.crt"
    strict = WebConfig(tmp_path / "web.yml", cert_file=crt, key_file=crt, client_auth=ssl.CERT_REQUIRED)
    assert weaker(strict, replace(strict, client_auth=ssl.CERT_OPTIONAL)) is not None
    assert weaker(strict, replace(strict, cert_file=None)) is not None  # TLS off
    assert weaker(replace(strict, client_auth=ssl.CERT_NONE), strict) is None  # stronger applies
