"""One frozen configuration, built once at start-up:
flags > ``RINGTRACE_*`` environment > config file (TOML) > defaults.

Every field can be set by a flag (``--idle-timeout``), an environment variable
(``RINGTRACE_IDLE_TIMEOUT``) or a key of the TOML file named by ``--config`` or
``RINGTRACE_CONFIG`` (``idle_timeout = 30``); a flag wins.  :func:`build` validates
everything and raises :class:`ConfigError` with a message that names the setting and where
it came from: every float setting must be finite (``nan`` and ``inf`` are rejected), durations
positive and at most a year, and the config file UTF-8 TOML.
"""


import math
import os
from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin, get_type_hints

import msgspec

from ringtrace.model.records import RESOURCES

ENV_PREFIX = "RINGTRACE_"
PURE_ENV = ENV_PREFIX + "PURE"


def pure_path(env: Mapping[str, str] | None = None) -> bool:
    """``RINGTRACE_PURE=1``: every compiled part (the reading core, the Perfetto encoder) is passed over for its
    pure-Python reference.  Read once by each part's switch when it is imported (``stages.core.COMPILED``, the
    Perfetto records' ``COMPILED``): which code reads is chosen for the process, not per run."""
    return (os.environ if env is None else env).get(PURE_ENV, "") == "1"


class Thresholds(msgspec.Struct, frozen=True):
    """Ratios (of capacity) that turn figures into findings."""

    near: float = 0.8
    """A ring resource at or above this share of its capacity is near capacity (also: the tensormap,
    and a wedged scope's own task-window allocation for SCOPE_DEADLOCK)."""
    idle: float = 0.05
    """A ring whose proven need is at most this share of the loaded ring's counts as idle (auto-scope collapse)."""
    wedge: float = 0.5
    """A wedge is blamed on the fullest resource of its ring only when that resource is at or above
    this share at the last sample (which is taken before the last submissions, so below ``near``)."""
    headroom: float = 0.1
    """The share ``advise`` adds over a proven need: every run's advice (summary JSON, events, the
    Prometheus recommended capacity) uses the configured ``--headroom``."""


_THRESHOLDS = Thresholds()
"""The thresholds' defaults, which :class:`Thresholds` states once."""


class ConfigError(Exception):
    """A setting is invalid; the message names it and its origin.  Exit code 2."""


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """All settings of one ringtrace process.  Immutable; pass it down, never read env elsewhere."""

    # reading and diagnosis
    near: float = _THRESHOLDS.near
    idle: float = _THRESHOLDS.idle
    wedge: float = _THRESHOLDS.wedge
    max_ratio: float | None = None  # check: a limit on a proven need / capacity (None: no limit)
    headroom: float = _THRESHOLDS.headroom  # advise: share added over the need
    resources: tuple[str, ...] = RESOURCES
    format: Literal["table", "json"] = "table"
    # watching
    poll: bool = False
    poll_interval: float = 0.1
    rescan_interval: float = 10.0
    idle_timeout: float = 30.0
    state_dir: str = ""
    events: str = ""
    host_log_glob: str = ""
    once: bool = False
    quiet: bool = False  # watch: no start, per-run and exit lines on stderr
    sink_stuck_timeout: float = 5.0  # a sink holding events that took none for this long is stuck (sinks.STUCK_SECONDS)
    # prometheus
    metrics_addr: str = ""
    web_config: str = ""
    series_ttl: float = 900.0
    series_budget: int = 300_000  # finished runs' series one agent exposes at most (0: no cap); the oldest go first
    metrics_advice: bool = False  # expose advice (recommended and measure-next capacities) on /metrics
    # report
    report_dir: str = ""  # watch: one HTML report per finished run here
    # perfetto
    perfetto_dir: str = ""
    perfetto_format: Literal["proto", "chrome-json"] = "proto"
    # opentelemetry
    otlp_endpoint: str = ""
    otlp_protocol: Literal["grpc", "http/protobuf"] = "grpc"
    otlp_tick: float = 1e-6
    otlp_max_spans: int = 10_000
    # process
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["debug", "info", "warning", "error"] = "warning"
    # the standard OTEL_* variables (endpoint, headers, certificates, timeouts) as the environment had them
    # at start-up: read here like every setting, used by the OTLP sink; not a RINGTRACE_* setting
    otel_env: tuple[tuple[str, str], ...] = ()

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(near=self.near, idle=self.idle, wedge=self.wedge, headroom=self.headroom)


FIELDS: tuple[str, ...] = tuple(f for f in Config.__struct_fields__ if f != "otel_env")
FIELD_TYPES: dict[str, Any] = get_type_hints(Config)
"""Each field's type, evaluated once (the annotations are strings: evaluating them is ~0.3 ms a time)."""
FLOAT_FIELDS: tuple[str, ...] = tuple(n for n, t in FIELD_TYPES.items() if t is float)
SECONDS_FIELDS = ("poll_interval", "rescan_interval", "idle_timeout", "series_ttl", "sink_stuck_timeout")
MAX_SECONDS = 366 * 86400
"""Durations above a year are refused (they also overflow thread and socket timeouts)."""


def _from_env(name: str, raw: str) -> Any:
    """Turn an environment string into the field's type (msgspec validates it afterwards)."""
    default = getattr(Config(), name)
    if isinstance(default, bool):
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{ENV_PREFIX}{name.upper()}={raw!r}: expected true or false")
    if isinstance(default, tuple):
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    if isinstance(default, int | float) and not isinstance(default, bool):
        try:
            return type(default)(raw)
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name.upper()}={raw!r}: expected a number") from None
    return raw


def _from_file(path: str, values: dict[str, Any], origin: dict[str, str]) -> None:
    import tomllib  # only with a config file: summary/check without one never load it

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ConfigError(f"config file {path}:{line}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path}: {err}") from None
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            raise ConfigError(f"config file {path}: unknown setting {key!r}")
        values[name] = tuple(value) if isinstance(value, list) else value
        origin[name] = f"{key} in {path}"


def build(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Flags (None = not given) > environment > config file > defaults, validated.

    The config file is ``flags["config"]`` or ``env["RINGTRACE_CONFIG"]``.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    config_file = (flags or {}).get("config") or env.get(ENV_PREFIX + "CONFIG")
    if config_file:
        _from_file(str(config_file), values, origin)
    for name in FIELDS:
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = _from_env(name, env[key])
            origin[name] = f"environment {key}"
    for name, value in (flags or {}).items():
        if name in FIELDS and value is not None:
            values[name] = tuple(value) if isinstance(value, list) else value
            origin[name] = "--" + name.replace("_", "-")
    try:
        cfg = msgspec.convert(values, Config, strict=False)
    except msgspec.ValidationError as err:
        field = str(err).rsplit("$.", 1)[-1].rstrip("`") if "$." in str(err) else ""
        where = origin.get(field, field)
        raise ConfigError(f"invalid setting {where}: {err}") from None
    _validate(cfg, origin)
    return msgspec.structs.replace(cfg, otel_env=tuple(sorted((k, v) for k, v in env.items() if k.startswith("OTEL_"))))


def _validate(cfg: Config, origin: Mapping[str, str]) -> None:
    def bad(name: str, why: str) -> ConfigError:
        return ConfigError(f"invalid setting {origin.get(name, name)}={getattr(cfg, name)!r}: {why}")

    for name in FLOAT_FIELDS:
        if not math.isfinite(getattr(cfg, name)):
            raise bad(name, "expected a finite number")
    for name in ("near", "idle", "wedge"):
        if not 0 < getattr(cfg, name) <= 1:
            raise bad(name, "expected a share of capacity in (0, 1], e.g. 0.8")
    if cfg.max_ratio is not None and not 0 < cfg.max_ratio <= 1:  # a proven need never passes capacity
        raise bad("max_ratio", "expected a ratio of capacity in (0, 1], e.g. 0.9")
    for name in SECONDS_FIELDS:
        if not 0 < getattr(cfg, name) <= MAX_SECONDS:
            raise bad(name, f"expected a positive number of seconds, at most {MAX_SECONDS} (a year)")
    if not 0 < cfg.otlp_tick <= 1:
        raise bad("otlp_tick", "expected a positive number of seconds per record, at most 1")
    if cfg.series_budget < 0:
        raise bad("series_budget", "expected a number of series, or 0 for no cap")
    if cfg.otlp_max_spans < 1:
        raise bad("otlp_max_spans", "expected at least 1")
    unknown = [r for r in cfg.resources if r not in RESOURCES]
    if unknown or not cfg.resources:
        raise bad("resources", f"expected some of {', '.join(RESOURCES)}")
    if cfg.metrics_addr and ":" not in cfg.metrics_addr:
        raise bad("metrics_addr", "expected HOST:PORT, e.g. 127.0.0.1:9464")


def literal_choices(name: str) -> tuple[str, ...]:
    """The allowed values of a Literal-typed field (for argparse ``choices``)."""
    tp = FIELD_TYPES[name]
    return tuple(get_args(tp)) if get_origin(tp) is Literal else ()
