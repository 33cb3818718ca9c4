"""Write the tables of ``docs/`` that the code already holds, so they cannot drift from it.

    .venv/bin/python docs/generate.py           # rewrite the generated blocks in place (make docs)
    .venv/bin/python docs/generate.py --check   # exit 1 and show the diff when a page is stale

A generated block sits between ``<!-- generated: NAME -->`` and ``<!-- /generated: NAME -->``; the
rest of each page is prose.  The blocks and their sources:

* ``metrics`` (reference.md): every family the exporter serves, read from the real collectors
  (the Prometheus sink fed the sample runs, the outlets', the OTLP sink's, the watcher's):
  name, type, labels, help.
* ``settings`` (reference.md): every :class:`ringtrace.config.Config` field with its variable,
  default, the commands that take its flag, and the flag's help.
* ``error-codes`` (reference.md): :data:`ringtrace.model.runtime.ERROR_CODES`.
* ``sinks`` (reference.md): every output of :data:`ringtrace.reading.registry.SINKS`: its commands,
  flags and what it writes.
* ``resources`` (reference.md): every row of :data:`ringtrace.model.runtime.TABLE`.
* ``options-COMMAND`` (commands.md): each command's flags, from its ``--help``.
* ``synopsis`` (README.md): each command's usage lines, from its ``--help`` at 100 columns.

Flags are read from each command's ``--help`` output and the setting a flag sets is found by
parsing it with the real parser: only public interfaces, no argparse internals.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prometheus_client.exposition import generate_latest  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from ringtrace import config  # noqa: E402
from ringtrace.cli import HELP, build_parser  # noqa: E402
from ringtrace.model.records import Advice, HostLog, Labels, RunAdvice, RunFinished, Source  # noqa: E402
from ringtrace.model.runtime import CONFIG_KEYS, ERROR_CODES, TABLE, fmt_amount  # noqa: E402
from ringtrace.reading.metrics import ReadingCollector  # noqa: E402
from ringtrace.reading.registry import SINKS  # noqa: E402
from ringtrace.sinks import FanOut, Sink  # noqa: E402
from ringtrace.sinks.otlp._metrics import OtlpCollector  # noqa: E402
from ringtrace.sinks.prometheus import RUN_LABELS, PrometheusSink  # noqa: E402
from ringtrace.sources.paths import find_sources  # noqa: E402
from ringtrace.stages.findings import RULES  # noqa: E402
from ringtrace.stages.run import Run  # noqa: E402

SAMPLES = ROOT / "tests" / "fixtures" / "samples"
L3_RANK = SAMPLES / "build_output/nested_l3_20261130_102011/dfx_outputs/rank0/d0/scope_stats/scope_stats.jsonl"
OPEN_SAMPLE = SAMPLES / "failed/NestedScopes_window4_flow_control_deadlock/dfx_outputs/scope_stats/scope_stats.jsonl"
PAGES = {"docs/reference.md": ("findings", "metrics", "run-series", "settings", "sinks", "resources", "error-codes"),
         "docs/commands.md": (*(f"options-{c}" for c in HELP), "options-shared"),
         "README.md": ("synopsis",)}
"""The pages with generated blocks, relative to the checkout, and their blocks."""
SYNOPSIS = ("summary", "check", "advise", "report", "convert", "watch", "diff", "demo")
"""The commands in the README's synopsis, in its order."""


# -- metrics --------------------------------------------------------------------------------------


class _NoWatches:
    """A tree watcher's counts, all 0 (the ``ringtrace_inotify_*`` families are served while inotify runs)."""

    watched = unwatched = rewatched = overflows = 0


class _Named(Sink):
    """A do-nothing sink: the outlets' families are per sink name."""

    name = "perfetto-dir"

    def receive(self, event: object) -> None: ...
    def flush(self, deadline: float | None = None) -> None: ...
    def close(self) -> None: ...


def _feed(sink: PrometheusSink, data: bytes, run: str, **final: object) -> None:
    import msgspec

    r = Run(Source(f"/{run}/scope_stats/scope_stats.jsonl", Labels(run=run)))
    for ev in [*r.feed(data), *r.finish("eof")]:
        sink.receive(msgspec.structs.replace(ev, **final) if final and isinstance(ev, RunFinished) else ev)


def exposition() -> str:
    """The exposition of a sink that has seen every kind of series: the sample runs, a failed run,
    a run with advice, a bad line, a run still open, and every collector the watch service registers."""
    from ringtrace.config import Thresholds
    from ringtrace.gather.oneshot import read_files

    sink = PrometheusSink(sink_errors=lambda: {"perfetto-dir": 0}, advice=True,
                          reader=lambda: {"files_watched": 0, "read_errors": 0, "in_flight_bytes": 0})
    files, _ = find_sources([str(SAMPLES)])
    read_files(files, FanOut([sink]), Thresholds())
    data = files[0].read_bytes()
    dropped = data.replace(b'"dropped": 0, "total": 1,', b'"dropped": 3, "total": 4,', 1)  # records dropped
    _feed(sink, dropped + b"not json\n", "failed", host_log=HostLog("/failed/host.log", orch_error_code=2))
    _feed(sink, data, "advised", advice=RunAdvice(advice=(
        Advice(1, "heap", 1024, None, 1024, 900, 1024, "tight", ""),
        Advice(2, "heap", 1024, None, 1024, None, None, "oversized", "", measure_next=512))))
    opened = Run(Source("/open/scope_stats/scope_stats.jsonl", Labels(run="open")))  # a run still being read
    for ev in opened.feed(OPEN_SAMPLE.read_bytes()):
        sink.receive(ev)
    sink.register(FanOut([_Named()]).collector())
    sink.register(OtlpCollector(lambda: {}))
    sink.register(ReadingCollector(lambda: _NoWatches(), lambda: 0))
    return generate_latest(sink.registry).decode()


def metrics_table() -> str:
    rows = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for fam in text_string_to_metric_families(exposition()):
        if not fam.name.startswith("ringtrace_"):
            continue
        labels: dict[str, None] = {}
        for s in fam.samples:
            labels.update(dict.fromkeys(k for k in s.labels if k not in RUN_LABELS))
        run = all(set(RUN_LABELS) <= set(s.labels) for s in fam.samples) and fam.samples
        name = fam.name + ("_total" if fam.type == "counter" else "")
        shown = (["run, rank, dispatch"] if run else []) + [f"`{k}`" for k in labels]
        rows.append(f"| `{name}` | {fam.type} | {', '.join(shown) or '-'} | {_cell(fam.documentation)} |")
    return "\n".join(rows)


def run_series_table() -> str:
    """The series of one rank of the runtime's L3 sample once finished, and of a run still open (the wedged
    sample, every record read), by family: what a run costs (issue 35)."""
    counts: dict[str, list[int]] = {}
    for i, (path, finish) in enumerate(((L3_RANK, True), (OPEN_SAMPLE, False))):
        sink = PrometheusSink()
        r = Run(Source(str(path), Labels(run="r", rank="0", dispatch="0")))
        for ev in [*r.feed(path.read_bytes()), *(r.finish("eof") if finish else ())]:
            sink.receive(ev)
        for fam in text_string_to_metric_families(generate_latest(sink.registry).decode()):
            n = sum(1 for x in fam.samples if x.labels.get("run") == "r")
            if n:
                counts.setdefault(fam.name, [0, 0])[i] = n
    rows = ["| series | a finished L3 rank | an open run |", "|---|---|---|"]
    rows += [f"| `{name}` | {a or '-'} | {b or '-'} |" for name, (a, b) in counts.items()]
    total = [sum(c[i] for c in counts.values()) for i in (0, 1)]
    rows.append(f"| **all** | **{total[0]}** | **{total[1]}** |")
    return "\n".join(rows)


# -- settings and options -------------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    flags: str  # as --help shows them: "-o FILE, --output FILE"
    help: str
    shared: bool  # listed under "shared options" (every command takes it)

    @property
    def long(self) -> str:
        longs: list[str] = [f for f in re.findall(r"--?[\w-]+", self.flags) if f.startswith("--")]
        return longs[-1]

    @property
    def values(self) -> list[list[str]]:
        """Values to try the flag with: none (a switch, an optional value), then a sample value."""
        choices = re.search(r"\{([^}]+)\}", self.flags)
        if choices:
            return [[c] for c in choices.group(1).split(",")]
        switch = re.fullmatch(r"(-\w, )?--[\w-]+", self.flags) is not None
        return [[]] if switch else [[], ["1"]] if "[" in self.flags else [["1"]]


def help_text(command: str, columns: int = 10000) -> str:
    """``command``'s ``--help`` as argparse wraps it at ``columns`` (default: one line per option)."""
    buf = io.StringIO()
    env = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)  # argparse wraps to the terminal
    try:
        with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
            build_parser().parse_args([command, "--help"])
    finally:
        if env is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = env
    return buf.getvalue()


def options(command: str) -> list[Option]:
    """The flags of ``command`` in --help order (``-h`` left out)."""
    out: list[Option] = []
    section = ""
    for line in help_text(command).splitlines():
        if line.endswith("options:"):
            section = line
            continue
        if not line.startswith("  "):
            section = ""
        m = re.match(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$", line) if section else None
        if m:
            out.append(Option(m.group(1), m.group(2) or "", section == "shared options:"))
        elif section and line.strip() and out:
            out[-1] = Option(out[-1].flags, (out[-1].help + " " + line.strip()).strip(), out[-1].shared)
    return [o for o in out if o.long != "--help"]


def _parse(argv: list[str]) -> dict[str, object] | None:
    with contextlib.redirect_stderr(io.StringIO()), contextlib.suppress(SystemExit):
        return vars(build_parser().parse_args(argv))
    return None


def setting_of(command: str, opt: Option) -> str:
    """The destination ``opt`` sets in ``command``'s namespace (found by parsing it)."""
    for positional in ([], ["p"], ["p", "p"]):
        base = _parse([command, *positional])
        if base is None:
            continue
        for value in opt.values:
            got = _parse([command, *positional, opt.long, *value])
            changed = [k for k in got or {} if got and got[k] != base.get(k)]
            if len(changed) == 1:
                return changed[0]
    raise SystemExit(f"{command} {opt.long}: cannot tell which setting it sets")


def _default(name: str) -> str:
    value = getattr(config.Config(), name)
    if value == "" or value == ():
        return "none"
    if isinstance(value, tuple):
        return "all" if name == "resources" else ",".join(map(str, value))
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").strip()


def _meaning(opt: Option) -> str:
    """The flag's help without its default (the table has a column for it)."""
    text = re.sub(r"\s*\(default [^)]*\)|^default \S+$", "", opt.help)
    choices = re.search(r"\{([^}]+)\}", opt.flags)
    if not text.strip() and choices:
        text = "one of " + ", ".join(choices.group(1).split(","))
    return _cell(text)


def settings_table() -> str:
    by_setting: dict[str, tuple[list[str], str, str]] = {}
    for command in HELP:
        for opt in options(command):
            dest = setting_of(command, opt)
            if dest not in config.FIELDS:
                continue
            commands, flag, meaning = by_setting.setdefault(dest, ([], opt.long, _meaning(opt)))
            commands.append(command)
            if not meaning:
                by_setting[dest] = (commands, flag, _meaning(opt))
    rows = ["| setting | flag | variable | default | commands | meaning |", "|---|---|---|---|---|---|"]
    for name in config.FIELDS:
        commands, flag, meaning = by_setting.get(name, ([], "", ""))
        every = "every command" if set(commands) == set(HELP) else ", ".join(commands)
        rows.append(f"| `{name}` | {f'`{flag}`' if flag else '-'} | `{config.ENV_PREFIX}{name.upper()}` | "
                    f"{_default(name)} | {every or '-'} | {meaning} |")
    return "\n".join(rows)


def options_table(command: str) -> str:
    """``command``'s own flags; ``shared``: the flags every command takes."""
    rows = ["| option | setting | meaning |", "|---|---|---|"]
    for opt in options("summary" if command == "shared" else command):
        if opt.shared != (command == "shared"):
            continue
        dest = setting_of(command if command != "shared" else "summary", opt)
        setting = f"`{dest}`" if dest in config.FIELDS else "-"
        rows.append(f"| `{opt.flags}` | {setting} | {_cell(opt.help)} |")
    return "\n".join(rows)


# -- error codes ----------------------------------------------------------------------------------


def error_codes_table() -> str:
    rows = ["| code | name | what it means | first move | RunConfig field |", "|---|---|---|---|---|"]
    for code, e in ERROR_CODES.items():
        field = f"`{CONFIG_KEYS[e.resource]}`" if e.resource else "-"
        rows.append(f"| {code} | `{e.name}` | {_cell(e.meaning)} | {_cell(e.move) or '-'} | {field} |")
    return "\n".join(rows)


# -- sinks and resources --------------------------------------------------------------------------


def sinks_table() -> str:
    rows = ["| output | commands | flags | setting(s) | writes |", "|---|---|---|---|---|"]
    for spec in SINKS:
        on: dict[str, list[str]] = {}
        for f in spec.flags:
            on.setdefault(f.options[-1], []).extend(c for c in f.commands if c not in on.get(f.options[-1], []))
        flags = [f"`{o}`" + (f" ({', '.join(cs)})" if set(cs) != set(spec.commands) else "") for o, cs in on.items()]
        fields = list(dict.fromkeys(f"`{f.dest}`" for f in spec.flags if f.dest in config.FIELDS))
        rows.append(f"| `{spec.name}` | {', '.join(spec.commands)} | {', '.join(flags) or '-'} | "
                    f"{', '.join(fields) or '-'} | {_cell(spec.doc)} |")
    return "\n".join(rows)


def resources_table() -> str:
    rows = ["| resource | counts | floor | granule | compile default | RunConfig field | metric suffix | since |",
            "|---|---|---|---|---|---|---|---|"]
    for r in TABLE:
        granule = "a power of two" if r.power_of_two else fmt_amount(r.name, r.granule)
        rows.append(f"| `{r.name}` | {r.unit}{' (a ring of N holds N - 1)' if r.holds_one_less else ''} | "
                    f"{fmt_amount(r.name, r.floor)} | {granule} | {fmt_amount(r.name, r.compile_default)} | "
                    f"`{r.config_key}` | {f'`{r.metric_suffix}`' if r.metric_suffix else '-'} | v{r.since_version} |")
    return "\n".join(rows)


# -- findings -------------------------------------------------------------------------------------


def findings_table() -> str:
    rows = ["| rule | severity | fails `check` | rests on | when |", "|---|---|---|---|---|"]
    for r in RULES:
        rows.append(f"| `{r.name}` | {r.severity} | {'yes' if r.fails_check else 'no'} | {_cell(r.rests_on)} | "
                    f"{_cell(r.doc)} |")
    return "\n".join(rows)


def synopsis() -> str:
    """The README's synopsis: each command's usage, as ``--help`` prints it on 100 columns."""
    usages = [help_text(c, columns=100).split("\n\n", 1)[0] for c in SYNOPSIS]
    return "```\n" + "\n".join(usages) + "\n```"


# -- the pages ------------------------------------------------------------------------------------


TABLES: dict[str, Callable[[], str]] = {"metrics": metrics_table, "run-series": run_series_table,
                                        "settings": settings_table,
                                        "error-codes": error_codes_table, "findings": findings_table,
                                        "sinks": sinks_table, "resources": resources_table, "synopsis": synopsis}
"""The generated blocks by name; any other name is ``options-COMMAND``."""


def block(name: str) -> str:
    table = TABLES.get(name)
    return table() if table is not None else options_table(name.removeprefix("options-"))


def rendered(page: str, text: str) -> str:
    """``text`` (the page ``page``, relative to the checkout) with each of its generated blocks written anew."""
    for name in PAGES[page]:
        begin, end = f"<!-- generated: {name} ", f"<!-- /generated: {name} -->"
        pattern = re.compile(rf"({re.escape(begin)}[^\n]*-->\n)(?:.*?\n)?({re.escape(end)})", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{page}: no block '{begin}...-->' ... '{end}'")
        body = block(name)

        def put(m: re.Match[str], body: str = body) -> str:
            return m.group(1) + body + "\n" + m.group(2)

        text = pattern.sub(put, text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a page differs from what it would be")
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout whose pages (default: this one)")
    args = ap.parse_args(argv)
    stale = 0
    for page in PAGES:
        path = args.root / page
        old = path.read_text()
        new = rendered(page, old)
        if new == old:
            continue
        if args.check:
            stale += 1
            sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                                       page, f"{page} (generated)"))
        else:
            path.write_text(new)
            print(f"{page}: rewritten")
    if stale:
        print(f"\n{stale} page(s) stale: run `make docs`", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
