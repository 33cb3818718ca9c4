"""Configuration: flags > RINGTRACE_* environment > TOML file > defaults, validated with clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from ringtrace.cli import main
from ringtrace.config import Config, ConfigError, build


def test_defaults_without_anything() -> None:
    assert build({}, {}) == Config()


def test_precedence_flag_over_env_over_file(tmp_path: Path) -> None:
    f = tmp_path / "rt.toml"
    f.write_text('idle_timeout = 7\nnear = 0.5\nmax_ratio = 0.9\nresources = ["heap"]\n')
    env = {"RINGTRACE_NEAR": "0.6", "RINGTRACE_MAX_RATIO": "0.95"}
    cfg = build({"config": str(f), "near": None, "max_ratio": 0.7}, env)
    assert cfg.idle_timeout == 7.0  # file
    assert cfg.near == 0.6  # env beats file
    assert cfg.max_ratio == 0.7  # flag beats env
    assert cfg.resources == ("heap",)


def test_config_file_from_environment(tmp_path: Path) -> None:
    f = tmp_path / "rt.toml"
    f.write_text("poll = true\n")
    assert build({}, {"RINGTRACE_CONFIG": str(f)}).poll is True


def test_env_parsing_of_each_kind() -> None:
    cfg = build({}, {"RINGTRACE_POLL": "yes", "RINGTRACE_RESOURCES": "heap, dep_pool", "RINGTRACE_OTLP_MAX_SPANS": "5",
                     "RINGTRACE_FORMAT": "json"})
    assert (cfg.poll, cfg.resources, cfg.otlp_max_spans, cfg.format) == (True, ("heap", "dep_pool"), 5, "json")


@pytest.mark.parametrize(("flags", "env", "text"), [
    ({}, {"RINGTRACE_NEAR": "x"}, "RINGTRACE_NEAR='x': expected a number"),
    ({}, {"RINGTRACE_POLL": "maybe"}, "RINGTRACE_POLL='maybe': expected true or false"),
    ({"idle_timeout": -1.0}, {}, "--idle-timeout=-1.0: expected a positive number of seconds"),
    ({}, {"RINGTRACE_IDLE_TIMEOUT": "0"}, "environment RINGTRACE_IDLE_TIMEOUT=0.0"),
    ({"resources": ["disk"]}, {}, "--resources=('disk',): expected some of task_window, heap, dep_pool"),
    ({"format": "xml"}, {}, "invalid setting --format"),
    ({"metrics_addr": "9464"}, {}, "expected HOST:PORT"),
])
def test_invalid_settings_name_the_setting_and_its_origin(flags: dict[str, object], env: dict[str, str],
                                                          text: str) -> None:
    with pytest.raises(ConfigError) as err:
        build(flags, env)
    assert text in str(err.value)


def test_bad_config_files(tmp_path: Path) -> None:
    f = tmp_path / "rt.toml"
    f.write_text("bogus = 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'bogus'"):
        build({"config": str(f)}, {})
    f.write_text("idle_timeout = [\n")
    with pytest.raises(ConfigError, match="config file"):
        build({"config": str(f)}, {})
    with pytest.raises(ConfigError, match="cannot read config file"):
        build({"config": str(tmp_path / "missing.toml")}, {})


def test_cli_reports_invalid_setting_with_exit_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    monkeypatch.setenv("RINGTRACE_MAX_RATIO", "-3")
    assert main(["check", str(tmp_path)]) == 2
    assert "RINGTRACE_MAX_RATIO" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--near", "--idle", "--wedge"])
@pytest.mark.parametrize("value", ["5", "0", "-0.1", "1.01"])
def test_shares_of_capacity_outside_0_1_are_refused_with_the_range(flag: str, value: str) -> None:
    from ringtrace.config import ConfigError, build

    with pytest.raises(ConfigError, match=r"\(0, 1\]"):
        build({flag.lstrip("-"): float(value)})


def test_the_otel_environment_is_read_by_the_config_alone() -> None:
    from ringtrace.config import build
    from ringtrace.reading.registry import otlp_wanted

    cfg = build({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "HOME": "/root"})
    assert cfg.otel_env == (("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),) and otlp_wanted(cfg)
    assert not otlp_wanted(build({}, {}))
