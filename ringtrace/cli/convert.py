"""``ringtrace convert``: runs as one Perfetto trace and/or OTLP spans."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ringtrace.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_OK
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.common import read_inputs as _read
from ringtrace.config import Config
from ringtrace.sinks import Sink


def run(args: argparse.Namespace, cfg: Config, out: Console, err: Console) -> int:
    from ringtrace.reading.service import otlp_sink, otlp_wanted
    from ringtrace.sinks.otlp import OtlpSink
    from ringtrace.sinks.perfetto import PerfettoSink

    if not args.output and not otlp_wanted(cfg):
        _err(err, "convert: nothing to write: give -o FILE (Perfetto) and/or --otlp-endpoint URL")
        return EXIT_INPUT
    sinks: list[Sink] = []
    perfetto: PerfettoSink | None = None
    otlp: OtlpSink | None = None
    try:
        if args.output:
            perfetto = PerfettoSink(Path(args.output), cfg.perfetto_format)
            sinks.append(perfetto)
        if otlp_wanted(cfg):
            otlp = otlp_sink(cfg, backpressure=True)
            sinks.append(otlp)
    except OSError as e:
        _err(err, f"{args.output}: cannot write: {e.strerror or e}")
        return EXIT_INPUT
    except ValueError as e:  # the SDK exporter rejects a bad OTEL_EXPORTER_OTLP_* value
        _err(err, f"cannot set up OTLP export: {e}")
        return EXIT_INPUT
    summary, ok = _read(args.paths, cfg, sinks, err, args.host_logs)
    if perfetto is not None:
        if perfetto.error is not None:
            _err(err, f"{args.output}: cannot write: {perfetto.error.strerror or perfetto.error}")
            ok = False
        else:
            out.print(f"wrote {args.output}: {len(summary.finished)} source(s); open it in https://ui.perfetto.dev",
                      highlight=False)
    if otlp is not None:
        for line in otlp.outcome():
            out.print(line, highlight=False)
        if otlp.spans_failed or otlp.spans_dropped_queue_full:
            return EXIT_FAIL
    return EXIT_OK if ok else EXIT_INPUT
