"""The text report: one finished run as a header, its verdict, a per-ring table, wedged scopes and findings.

Called by ``summary`` (table format) and ``demo`` after the sinks close; it writes to the
console it is given and never reads files.
"""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ringtrace.analysis.need import proven_need
from ringtrace.model.records import RunFinished
from ringtrace.stages.diagnose import describe_log, fmt_amount

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


class _Trimmed:
    """``inner``'s lines without the spaces rich pads them with (a table pads every cell to its column)."""

    def __init__(self, inner: RenderableType) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in console.render_lines(self.inner, options, pad=False):
            while line and not line[-1].control and not line[-1].text.strip():
                line.pop()
            if line:
                last = line[-1]
                line[-1] = Segment(last.text.rstrip(), last.style, last.control)
            yield from line
            yield Segment.line()


def print_trimmed(console: Console, table: RenderableType) -> None:
    """Print ``table`` (or any renderable) with no line ending in spaces."""
    console.print(_Trimmed(table), soft_wrap=False)


def _sentence(console: Console, text: Text) -> None:
    """A verdict, finding or note: indented two columns, wrapped at the console's width (not 300 wide) at
    word boundaries, no line padded with spaces."""
    for line in text.wrap(console, max(20, console.width - 2)):
        line.rstrip()
        console.print(Text("  ").append_text(line), soft_wrap=True, highlight=False)


def render_run(console: Console, fin: RunFinished) -> None:
    """One run as a header, a per-ring table, wedged scopes and findings."""
    s, meta = fin.summary, fin.summary.meta
    log = fin.host_log
    name = fin.source.display_path or (f"(no scope_stats file; host log {log.path})" if log else "")
    head = f"[bold]{escape(name)}[/bold]"  # paths and sites are data, never markup
    if meta is not None:
        head += (f"\n  version {meta.version}  records {s.records}/{meta.total}  dropped {meta.dropped}  "
                 f"fatal {str(meta.fatal).lower()}  complete {str(s.complete).lower()}")
    records = bool(fin.source.path) or log is None  # a run known from its host log alone has no figures
    if records:
        head += (f"\n  scopes {s.scopes}  max depth {s.max_depth}  unmatched begins {s.unmatched_begins}  "
                 f"ends {s.unmatched_ends}  parse errors {s.parse_errors}")
    console.print(head)
    v = fin.verdict
    verdict = Text("verdict ", style="bold")
    verdict.append(v.severity, style=_STYLE.get(v.severity, "green"))
    verdict.append(f": {v.text}")
    _sentence(console, verdict)
    if log is not None:  # sentences: wrapped at the console's width
        said = describe_log(log) if log.failed else "no failure reported"
        _sentence(console, Text(f"host log {log.path}: {said}"))
        if log.ring_sizes is not None:
            rs = log.ring_sizes
            _sentence(console, Text(f"host log ring sizes: task_window={list(rs.task_window)} heap={list(rs.heap)} "
                                    f"dep_pool={list(rs.dep_pool)}"))
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("ring", "resource", "capacity", "proven need", "need", "high water", "live at exit", "largest alloc",
                "peak site"):
        table.add_column(col, justify="left" if col in ("resource", "peak site") else "right",
                         overflow="fold")  # a narrow terminal wraps a site, never cuts its line number
    for p in s.peaks:
        if not p.scopes:
            continue
        need = proven_need(p, s).value
        ratio = need / p.capacity if need and p.capacity else None
        use = "-" if ratio is None else f"{100 * ratio:.1f}%"
        style = "red" if ratio is not None and ratio >= 1 else "yellow" if ratio is not None and ratio >= 0.8 else ""
        table.add_row(str(p.ring), p.resource, "?" if p.capacity is None else fmt_amount(p.resource, p.capacity),
                      fmt_amount(p.resource, need) if need else "-", f"[{style}]{use}[/]" if style else use,
                      fmt_amount(p.resource, p.high_water), fmt_amount(p.resource, p.live_at_exit),
                      fmt_amount(p.resource, p.alloc), Text(p.high_water_site))
    tm = s.tensormap
    table.add_row("-", "tensormap", "?" if tm.capacity is None else str(tm.capacity), "", "", str(tm.peak), "", "",
                  Text(tm.peak_site))
    if records:
        print_trimmed(console, table)
    if s.wedged:
        console.print("  [bold red]wedged scopes[/] (outermost first; the last is where the run stopped):")
        for w in s.wedged:
            console.print(f"    line {w.line}: {w.site}  depth {w.depth}  ring {w.ring}", markup=False)
    for f in fin.findings:
        line = Text(f.severity, style=_STYLE[f.severity])
        line.append(f" {f.rule}: {f.message}")
        _sentence(console, line)
    shown = fin.problems[:10]
    for prob in shown:
        where = f"{fin.source.path}:{prob.line}" if prob.line else fin.source.path
        console.print(f"  {prob.severity} {where}: {prob.message}", markup=False,
                      highlight=False)
    if s.parse_errors > sum(prob.severity == "error" for prob in shown):
        console.print(f"  ({s.parse_errors} parse errors in all)")
    console.print()
