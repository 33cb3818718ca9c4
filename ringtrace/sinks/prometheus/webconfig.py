"""``--web-config FILE``: the Prometheus exporter-toolkit web config, its reloads and basic auth.

* :func:`load_web_config` parses and validates a whole file (``tls_server_config``,
  ``basic_auth_users`` with bcrypt hashes, ``http_server_config.headers``); relative file names
  are relative to FILE.  Anything short of a complete, valid file raises :class:`WebConfigError`:
  a bcrypt hash must be whole (60 characters), so a file caught half-written does not pass.
* :class:`WebSettings` holds the config in force.  :meth:`WebSettings.changed` is a cheap
  ``stat`` of FILE and the certificate files; :meth:`WebSettings.reload` (blocking: call it off
  the event loop) swaps in the new config only when it loads completely *and* is not weaker
  than the one in force (TLS on/off, dropping basic auth or client-certificate verification need
  a restart): a config caught half-written never serves ``/metrics`` without the authentication
  it had.  A refused reload is logged and the last good config stays.
* :class:`BasicAuth` checks ``Authorization`` headers against the bcrypt hashes.  An unknown user
  is checked against a dummy hash of the same cost as the configured ones, so the answer takes
  as long as for a known user with a wrong password.  Accepted credentials are remembered
  (bounded) because bcrypt is slow by design; rejected ones never are.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bcrypt
import yaml

log = logging.getLogger("ringtrace.http")

AUTH_CACHE = 256
_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")  # cost 4 to 31
_TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                 "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
                "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
             "prefer_server_cipher_suites"}
_UNSUPPORTED_TLS = {"cipher_suites", "curve_preferences", "client_allowed_sans", "cert", "key"}


class WebConfigError(ValueError):
    """The web config file is unreadable, invalid or refused; the message names the file and the key (a
    ``ValueError``: the commands report it as any unusable setting, without importing this module)."""


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

    def stamp(self) -> tuple[tuple[int, int, int], ...]:
        """(mtime, size, inode) of this file and the certificate files it names (-1s: missing)."""
        out = []
        for f in (self.path, self.cert_file, self.key_file, self.client_ca_file):
            if f is None:
                continue
            try:
                st = os.stat(f)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append((-1, -1, -1))
        return tuple(out)

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


def _mapping(value: Any, where: str, allowed: set[str] | None = None) -> dict[str, Any]:
    """``value`` as a mapping with str keys ({} for None) and, with ``allowed``, no other keys."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise WebConfigError(f"{where}: expected a mapping")
    unknown = set(value) - allowed if allowed is not None else set()
    if unknown:
        raise WebConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    return value


def bcrypt_cost(hashed: bytes) -> int:
    """The cost (log2 rounds) of a bcrypt hash ``$2y$NN$...``."""
    return int(hashed[4:6])


def _tls(path: Path, tls: dict[str, Any]) -> dict[str, Any]:
    """The :class:`WebConfig` fields of ``tls_server_config``."""
    bad = set(tls) & _UNSUPPORTED_TLS
    if bad:
        raise WebConfigError(f"{path}: tls_server_config.{sorted(bad)[0]} is not supported by ringtrace")
    _mapping(tls, f"{path}: tls_server_config", _TLS_KEYS)

    def file(key: str) -> Path | None:
        value = tls.get(key)
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            raise WebConfigError(f"{path}: tls_server_config.{key}: expected a file name")
        p = Path(value)
        return p if p.is_absolute() else path.parent / p

    kw: dict[str, Any] = {"cert_file": file("cert_file"), "key_file": file("key_file"),
                          "client_ca_file": file("client_ca_file")}
    if kw["cert_file"] is None or kw["key_file"] is None:
        raise WebConfigError(f"{path}: tls_server_config needs both cert_file and key_file")
    auth = tls.get("client_auth_type") or "NoClientCert"
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(f"{path}: tls_server_config.client_auth_type {auth!r}: expected one of "
                             f"{', '.join(_CLIENT_AUTH)}")
    kw["client_auth"] = _CLIENT_AUTH[auth]
    if auth != "NoClientCert" and kw["client_ca_file"] is None:
        raise WebConfigError(f"{path}: tls_server_config.client_auth_type {auth} needs client_ca_file")
    for key in ("min_version", "max_version"):
        value = tls.get(key)
        if value is not None:
            if value not in _TLS_VERSIONS:
                raise WebConfigError(f"{path}: tls_server_config.{key} {value!r}: expected one of "
                                     f"{', '.join(_TLS_VERSIONS)}")
            kw[key] = _TLS_VERSIONS[value]
    return kw


def load_web_config(path: Path) -> WebConfig:
    """Parse and validate ``path`` (exporter-toolkit format); raises :class:`WebConfigError`."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise WebConfigError(f"{path}: cannot read web config: {err.strerror or err}") from None
    except UnicodeDecodeError:
        raise WebConfigError(f"{path}: invalid web config: not UTF-8") from None
    except yaml.YAMLError as err:
        raise WebConfigError(f"{path}: invalid YAML: {err}") from None
    top = _mapping(raw, str(path), {"tls_server_config", "basic_auth_users", "http_server_config"})
    tls = _mapping(top.get("tls_server_config"), f"{path}: tls_server_config")
    kw: dict[str, Any] = _tls(path, tls) if tls else {}
    users = _mapping(top.get("basic_auth_users"), f"{path}: basic_auth_users")
    for user, hashed in users.items():
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise WebConfigError(f"{path}: basic_auth_users.{user}: expected a whole bcrypt hash ($2y$10$ and 53 "
                                 "characters)")
    kw["users"] = {user: hashed.encode() for user, hashed in users.items()}
    http_cfg = _mapping(top.get("http_server_config"), f"{path}: http_server_config", {"headers", "http2"})
    headers = _mapping(http_cfg.get("headers"), f"{path}: http_server_config.headers")
    kw["headers"] = {str(k): str(v) for k, v in headers.items()}
    cfg = WebConfig(path, **kw)
    if cfg.tls:
        cfg.ssl_context()  # fail now, not at the first connection
    return cfg


def weaker(old: WebConfig, new: WebConfig) -> str | None:
    """Why ``new`` may not replace ``old`` without a restart, or None."""
    if new.tls != old.tls:
        return "turning TLS on or off needs a restart"
    if old.users and not new.users:
        return "basic_auth_users is gone (a half-written file?); removing basic auth needs a restart"
    if new.client_auth < old.client_auth:  # VerifyMode: NONE < OPTIONAL < REQUIRED
        return "a weaker client_auth_type (a half-written file?) needs a restart"
    return None


class BasicAuth:
    """``Authorization: Basic`` checks against bcrypt hashes (one instance per loaded config).

    :meth:`check` is blocking (bcrypt): call it off the event loop.  Thread-safe.
    """

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._ok: dict[bytes, None] = {}
        self._lock = threading.Lock()
        cost = max((bcrypt_cost(h) for h in users.values()), default=4)
        self.dummy_hash = bcrypt.hashpw(b"ringtrace-dummy", bcrypt.gensalt(rounds=cost)) if users else b""

    @property
    def cached(self) -> int:
        """How many accepted credentials are remembered."""
        with self._lock:
            return len(self._ok)

    def _parse(self, header: str | None) -> tuple[str, str, bytes] | None:
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        hashed = self.users.get(user, b"")
        key = hashlib.sha256(b"\0".join((user.encode(), password.encode(), hashed))).digest()
        return user, password, key

    def known(self, header: str | None) -> bool:
        """True when ``header`` holds credentials accepted before (cheap, never blocks)."""
        if not self.users:
            return True
        parsed = self._parse(header)
        with self._lock:
            return parsed is not None and parsed[2] in self._ok

    def check(self, header: str | None) -> bool:
        """Whether ``header`` holds valid credentials (always one bcrypt check for a parsable header)."""
        if not self.users:
            return True
        parsed = self._parse(header)
        if parsed is None:
            return False
        user, password, key = parsed
        hashed = self.users.get(user)
        try:  # an unknown user costs the same bcrypt check, so timing does not reveal user names
            ok = bcrypt.checkpw(password.encode(), hashed if hashed is not None else self.dummy_hash)
        except ValueError:
            return False
        if not ok or hashed is None:
            return False
        with self._lock:
            if len(self._ok) >= AUTH_CACHE:
                self._ok.pop(next(iter(self._ok)))
            self._ok[key] = None
        return True


@dataclass(frozen=True)
class Active:
    """What is in force: the config (None without ``--web-config``), its TLS context and auth."""

    config: WebConfig | None
    context: ssl.SSLContext | None
    auth: BasicAuth

    @property
    def headers(self) -> dict[str, str]:
        return self.config.headers if self.config is not None else {}


class WebSettings:
    """The web config in force (:attr:`active`, swapped atomically) and its reload."""

    def __init__(self, path: Path | None) -> None:
        cfg = load_web_config(path) if path is not None else None
        self.active = self._activate(cfg)
        self._stamp = cfg.stamp() if cfg is not None else ()

    @staticmethod
    def _activate(cfg: WebConfig | None) -> Active:
        return Active(cfg, cfg.ssl_context() if cfg is not None and cfg.tls else None,
                      BasicAuth(cfg.users if cfg is not None else {}))

    def changed(self) -> bool:
        """Whether a watched file changed since the last (attempted) reload: a few ``stat`` calls."""
        cfg = self.active.config
        return cfg is not None and cfg.stamp() != self._stamp

    def reload(self) -> None:
        """Re-read the config when a watched file changed (blocking; bcrypt and file reads)."""
        cfg = self.active.config
        if cfg is None or (stamp := cfg.stamp()) == self._stamp:
            return
        self._stamp = stamp
        try:
            new = load_web_config(cfg.path)
            why = weaker(cfg, new)
            if why is not None:
                raise WebConfigError(f"{cfg.path}: {why}")
            self.active = self._activate(new)
            self._stamp = new.stamp()
            log.info("web config %s reloaded", cfg.path)
        except WebConfigError as err:
            log.error("%s; keeping the previous web config", err)
