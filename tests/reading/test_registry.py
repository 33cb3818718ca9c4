"""The registry of sinks (:mod:`ringtrace.reading.registry`): every output declared once, and everything
else (flags, Config fields, the built sinks, the docs' table) follows from it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from ringtrace import config
from ringtrace.cli import build_parser
from ringtrace.reading.registry import SINKS, Context, Flag, SetupError, SinkFlags, SinkSpec, build_sinks
from ringtrace.reading.service import assemble
from ringtrace.sinks import Sink
from ringtrace.sinks.events import EventsSink
from ringtrace.sinks.otlp import OtlpSink
from ringtrace.sinks.perfetto import PerfettoDirSink, PerfettoSink


def test_every_flag_sets_a_config_field_or_a_commands_own_argument() -> None:
    for spec in SINKS:
        for flag in spec.flags:
            assert flag.dest in config.FIELDS or flag.dest == "output", (spec.name, flag.options)
            assert set(flag.commands) <= set(spec.commands) | {"demo", "watch"}, (spec.name, flag.options)


def test_every_sink_flag_is_on_its_commands_parser() -> None:
    parser = build_parser()
    for spec in SINKS:
        for flag in spec.flags:
            for command in flag.commands:
                got = vars(parser.parse_args([command, *(["p"] if command != "demo" else []), flag.options[-1],
                                              *(_value(flag))]))
                assert flag.dest in got and got[flag.dest] is not None, (command, flag.options)


def _value(flag: Flag) -> list[str]:
    if flag.switch:
        return []
    if flag.choices:
        return [config.literal_choices(flag.dest)[-1]]
    if flag.type is not None:
        return ["1"]
    return ["x"]


def test_helps_name_the_config_default_without_repeating_it() -> None:
    help_of = {f.dest: f for s in SINKS for f in s.flags if "{default}" in f.help}
    assert {"otlp_protocol", "otlp_tick", "otlp_max_spans", "series_ttl", "perfetto_format"} <= set(help_of)
    p = argparse.ArgumentParser()
    SinkFlags(p, "watch").rest()
    text = " ".join(p.format_help().split())
    assert "(default 1e-6)" in text and "(default 900)" in text and "default grpc" in text


def test_watch_convert_and_demo_build_their_sinks_from_the_registry(tmp_path: Path) -> None:
    cfg = config.build({"events": str(tmp_path / "ev.jsonl"), "perfetto_dir": str(tmp_path / "traces"),
                        "otlp_endpoint": "http://127.0.0.1:9"}, {})
    built = build_sinks(cfg, Context("watch"))
    assert [s.name for s, _ in built] == ["events", "perfetto-dir", "otlp", "log"]
    assert [type(k) for _, k in built][:3] == [EventsSink, PerfettoDirSink, OtlpSink]
    for _, sink in built:
        sink.close()
    built = build_sinks(cfg, Context("convert", output=str(tmp_path / "t.pftrace")))
    assert [type(k) for _, k in built] == [PerfettoSink, OtlpSink]
    for _, sink in built:
        sink.close()
    service = assemble(cfg, [str(tmp_path)], command="demo")
    assert [s.name for s in service.fanout.sinks] == ["events", "perfetto-dir", "otlp", "log"]
    assert any("perfetto traces" in n for n in service.notes)
    service.fanout.close()


def test_a_sink_that_cannot_be_set_up_names_itself_and_closes_the_others(tmp_path: Path) -> None:
    cfg = config.build({"events": str(tmp_path / "ev.jsonl"),
                        "otlp_endpoint": "ftp://nowhere"}, {})
    with pytest.raises(SetupError) as got:
        build_sinks(cfg, Context("watch"))
    assert got.value.spec.name == "otlp" and isinstance(got.value.error, ValueError)


class _StandIn(Sink):
    """A sink added by a test (named so that it meets no real sink, nor the one docs/design.md adds in
    its worked example): it keeps the names of the events it receives."""

    name = "stand-in"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []

    def receive(self, event: object) -> None:
        self.lines.append(type(event).__name__)


def test_a_new_sink_is_one_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adding a spec is all it takes: its flag appears on the command, and the command builds it."""
    spec = SinkSpec("stand-in", ("watch",), lambda cfg, ctx: bool(cfg.report_dir),
                    lambda cfg, ctx: _StandIn(tmp_path),
                    (Flag(("--stand-in-dir",), "report_dir", "a test output", ("watch",), metavar="DIR"),))
    monkeypatch.setattr("ringtrace.reading.registry.SINKS", (*SINKS, spec))
    monkeypatch.setattr("ringtrace.reading.registry.BY_NAME", {s.name: s for s in (*SINKS, spec)})
    p = argparse.ArgumentParser()
    SinkFlags(p, "watch").rest()
    assert p.parse_args(["--stand-in-dir", "d"]).report_dir == "d"
    cfg = config.build({"report_dir": str(tmp_path)}, {})
    built = build_sinks(cfg, Context("watch", output=""))
    assert [s.name for s, _ in built][-2:] == ["log", "stand-in"] and isinstance(built[-1][1], _StandIn)
