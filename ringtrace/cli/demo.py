"""``ringtrace demo``: the simulator (:mod:`ringtrace.demo.sim`) writes an L2 and an L3 build tree live while
the watch service follows it with every configured sink; at the end, the per-run summary and what to open.

The pauses between the simulator's steps are pacing for a person watching, not synchronisation: the demo
waits for the watch to run (``App.wait_ready``) and then for the service's finished runs
(``SummarySink.wait_finished``, with a deadline).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

import msgspec
from rich.console import Console

from ringtrace.cli.common import EXIT_INPUT, Consoles
from ringtrace.cli.common import err_line as _err
from ringtrace.cli.text import render_run
from ringtrace.config import Config
from ringtrace.demo.sim import write_tree
from ringtrace.reading.service import Service, assemble
from ringtrace.sinks.summary import SummarySink

FINISH_DEADLINE = 60.0


def print_summaries(out: Console, summary: SummarySink) -> None:
    out.print()
    for fin in summary.finished:
        render_run(out, fin)


async def _drive(service: Service, root: Path, pace: float, summary: SummarySink, serve: bool,
                 out: Console) -> int:
    app = service.app
    task = asyncio.create_task(app.run())
    await app.wait_ready()
    files: set[Path] = set()
    for step in write_tree(root, ts=time.strftime("%Y%m%d_%H%M%S")):
        if step.action == "create":
            files.add(step.path)
            out.print(f"[dim]writer:[/] {step.path.relative_to(root)} ({step.scenario})", highlight=False)
        await asyncio.sleep(pace)
    await asyncio.to_thread(summary.wait_finished, len(files), FINISH_DEADLINE)
    if serve:  # what was followed first, then keep serving
        print_summaries(out, summary)
        out.print("serving until Ctrl-C ...")
        with contextlib.suppress(asyncio.CancelledError):
            await task
    app.stop()
    await task
    return len(files)


async def _main(cfg: Config, root: Path, build: Path, pace: float, summary: SummarySink, serve: bool,
                out: Console) -> int:
    service = assemble(cfg, [str(build)], extra=[summary], command="demo")
    try:
        await service.start()
    except OSError:
        if cfg.metrics_addr.endswith(":0"):
            raise
        host = cfg.metrics_addr.rsplit(":", 1)[0]  # the default port is taken: any free port will do
        service = assemble(msgspec.structs.replace(cfg, metrics_addr=f"{host}:0"), [str(build)], extra=[summary],
                           command="demo")
        await service.start()
    out.print(f"[bold]ringtrace demo[/]: a simulated runtime writes into {root}")
    for note in service.notes:
        out.print(f"  {note}", highlight=False)
    try:
        return await _drive(service, root, pace, summary, serve, out)
    finally:
        await service.stop()


def run_demo(cfg: Config, directory: str, pace: float, out: Console, serve: bool = False) -> int:
    """Write the trees under ``directory`` (a new temporary folder when empty) and follow them.

    Returns 0 when every simulated file was followed to its end, 1 otherwise.
    """
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="ringtrace-demo-"))
    build = root / "build_output"
    build.mkdir(parents=True, exist_ok=True)
    if not cfg.perfetto_dir:
        cfg = msgspec.structs.replace(cfg, perfetto_dir=str(root / "traces"))
    summary = SummarySink()
    files = asyncio.run(_main(cfg, root, build, pace, summary, serve, out))
    if not serve:  # with --serve they were printed before serving
        print_summaries(out, summary)
    wedged = sum(1 for f in summary.finished if f.summary.wedged)
    out.print(f"[bold]{len(summary.finished)} of {files} runs followed to their end[/], {wedged} wedged. Try:")
    out.print(f"  .venv/bin/ringtrace summary {build}", highlight=False)
    out.print(f"  .venv/bin/ringtrace check {build}   # a CI gate: exits 1 here (a wedged, fatal rank)",
              highlight=False)
    out.print(f"  .venv/bin/ringtrace watch {build} --metrics-addr   # then open the metrics URL", highlight=False)
    out.print(f"  .venv/bin/ringtrace convert {build} -o demo.pftrace   # every run in one Perfetto trace",
              highlight=False)
    out.print(f"  open the traces in {cfg.perfetto_dir} with https://ui.perfetto.dev", highlight=False)
    return 0 if len(summary.finished) == files else 1


def run(args: argparse.Namespace, cfg: Config, io: Consoles) -> int:
    try:
        return run_demo(cfg, args.dir, args.pace, io.out, args.serve)
    except (OSError, ValueError) as e:  # a WebConfigError is a ValueError
        _err(io.err, f"cannot set up outputs: {e}")
        return EXIT_INPUT
