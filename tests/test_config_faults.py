"""Settings that would break the watcher at run time are refused at start-up, naming the setting
and where it came from (flag, environment, config file): non-finite floats, non-positive or
absurd durations, a config file that is not UTF-8."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ringtrace.config import FIELDS, FLOAT_FIELDS, MAX_SECONDS, SECONDS_FIELDS, Config, ConfigError, build


def test_every_float_setting_is_checked() -> None:
    floats = {name for name in FIELDS if isinstance(getattr(Config(), name), float)}
    assert set(FLOAT_FIELDS) == floats and {"poll_interval", "idle_timeout", "otlp_tick", "near"} <= floats


def _origins(name: str, text: str, toml: str, tmp_path: Path) -> list[tuple[dict[str, object], dict[str, str], str]]:
    f = tmp_path / "rt.toml"
    f.write_text(f"{name} = {toml}\n")
    return [({name: float(text)}, {}, "--" + name.replace("_", "-")),
            ({}, {"RINGTRACE_" + name.upper(): text}, "environment RINGTRACE_" + name.upper()),
            ({"config": str(f)}, {}, f"{name} in {f}")]


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize(("text", "toml"), [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf")])
def test_non_finite_floats_are_refused_from_every_origin(name: str, text: str, toml: str, tmp_path: Path) -> None:
    for flags, env, origin in _origins(name, text, toml, tmp_path):
        with pytest.raises(ConfigError) as err:
            build(flags, env)
        assert f"invalid setting {origin}=" in str(err.value)
        assert "expected a finite number" in str(err.value)


@pytest.mark.parametrize("name", SECONDS_FIELDS)
@pytest.mark.parametrize("value", [0.0, -1.0, MAX_SECONDS * 2.0])
def test_durations_must_be_positive_and_at_most_a_year(name: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"--{name.replace('_', '-')}=.*expected a positive number of seconds"):
        build({name: value}, {})


def test_the_largest_duration_is_accepted() -> None:
    assert build({"idle_timeout": float(MAX_SECONDS)}, {}).idle_timeout == MAX_SECONDS


@pytest.mark.parametrize("value", [0.0, -1e-6, 2.0])
def test_otlp_tick_is_a_positive_number_of_seconds_up_to_one(value: float) -> None:
    with pytest.raises(ConfigError, match="--otlp-tick="):
        build({"otlp_tick": value}, {})


def test_config_file_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "rt.toml"
    f.write_bytes(b"near = 0.5\n# caf\xe9\nidle = 0.1\n")
    with pytest.raises(ConfigError) as err:
        build({"config": str(f)}, {})
    assert f"config file {f}:2: not UTF-8 text" in str(err.value)


def _run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringtrace", *map(str, argv)], capture_output=True, text=True,
                          timeout=60, check=False, env=env)


@pytest.mark.parametrize(("argv", "text"), [
    (["watch", "--once", "--poll", "--poll-interval", "nan"], "--poll-interval=nan: expected a finite number"),
    (["watch", "--once", "--idle-timeout", "inf"], "--idle-timeout=inf: expected a finite number"),
    (["watch", "--once", "--otlp-tick", "nan"], "--otlp-tick=nan: expected a finite number"),
    (["summary", "--near", "nan"], "--near=nan"),
])
def test_a_non_finite_flag_is_exit_2_without_a_traceback(argv: list[str], text: str, tmp_path: Path) -> None:
    r = _run(*argv, tmp_path)
    assert r.returncode == 2 and text in r.stderr and "Traceback" not in r.stderr


def test_a_non_utf8_config_file_is_exit_2_without_a_traceback(tmp_path: Path) -> None:
    f = tmp_path / "rt.toml"
    f.write_bytes(b"poll_interval = 0.5\nevents = \"\xff\xfe\"\n")
    r = _run("watch", "--once", "--config", f, tmp_path)
    assert r.returncode == 2 and f"config file {f}:2: not UTF-8 text" in r.stderr and "Traceback" not in r.stderr
