"""``ringtrace convert``: runs as one Perfetto trace and/or OTLP spans (the registry's ``convert`` sinks)."""

from __future__ import annotations

import argparse

from ringtrace.cli.common import EXIT_FAIL, EXIT_INPUT, EXIT_OK, Consoles
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.common import read_inputs as _read
from ringtrace.config import Config


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    from ringtrace.reading.registry import Context, SetupError, build_sinks

    try:
        built = build_sinks(cfg, Context("convert", output=args.output or ""))
    except SetupError as e:
        if isinstance(e.error, OSError):
            _err(io.err, f"{e.where}: cannot write: {e.error.strerror or e.error}")
        else:  # the SDK exporter rejects a bad OTEL_EXPORTER_OTLP_* value
            _err(io.err, f"cannot set up {e.spec.title or e.spec.name}: {e.error}")
        return EXIT_INPUT
    if not built:
        _err(io.err, "convert: nothing to write: give -o FILE (Perfetto) and/or --otlp-endpoint URL")
        return EXIT_INPUT
    got = _read(args.paths, cfg, [sink for _, sink in built], io, args.host_logs)
    summary, ok = got.summary, got.ok
    failed = False
    for spec, sink in built:
        if spec.outcome is None:
            continue
        lines, errors, bad = spec.outcome(sink, len(summary.finished))
        for line in errors:
            _err(io.err, line)
        for line in lines:
            io.out.print(line, highlight=False)
        if bad and errors:
            ok = False
        elif bad:
            failed = True
    if failed:
        return EXIT_FAIL
    return EXIT_OK if ok else EXIT_INPUT
