"""Terminal text: one finished run as a header, its verdict, a per-ring table, wedged scopes and findings;
the table fitter and the sentence wrapper every command prints with.

Called by ``summary`` (table format) and ``demo`` after the sinks close; it writes to the
console it is given and never reads files.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.markup import escape
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ringtrace.config import Thresholds
from ringtrace.model.records import RESOURCES, RunFinished
from ringtrace.stages.diagnose import describe_log, fmt_amount
from ringtrace.stages.need import proven_need

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


def sentence(console: Console, text: Text | str, indent: int = 2) -> None:
    """A verdict, finding, reason or note: indented ``indent`` columns, wrapped at the console's width (not 300
    wide) at word boundaries, no line padded with spaces."""
    text = Text(text) if isinstance(text, str) else text
    for line in text.wrap(console, max(20, console.width - indent)):
        line.rstrip()
        console.print(Text(" " * indent).append_text(line), soft_wrap=True, highlight=False)



class Column(msgspec.Struct, frozen=True):
    """A column of :func:`print_table`: its heading (unique in its table; it may wrap between its words), ``right``
    aligned or not, and whether its cells may ``wrap`` between words (else a cell is never broken)."""

    name: str
    right: bool = False
    wrap: bool = False


def _words(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def table_widths(columns: Sequence[Column], rows: Sequence[Sequence[Text]], room: int) -> list[int] | None:
    """Column widths that fit ``room`` (the gaps already taken out), or None when no table does: every column
    its longest cell when all fit, else at least its longest heading word and its longest unbreakable cell (a
    word of a ``wrap`` column, a whole cell of another), the rest shared by what each would still take."""
    full = [max([len(c.name), *(len(r[i].plain) for r in rows)]) for i, c in enumerate(columns)]
    if sum(full) <= room:
        return full
    least = [max([_words(c.name), *((_words(r[i].plain) if c.wrap else len(r[i].plain)) for r in rows)])
             for i, c in enumerate(columns)]
    extra = room - sum(least)
    if extra < 0:
        return None
    want = [f - m for f, m in zip(full, least, strict=True)]
    total = sum(want) or 1
    return [m + extra * w // total for m, w in zip(least, want, strict=True)]


def _pack(console: Console, items: Sequence[Text], indent: int) -> None:
    """``items`` joined by "; ", indented, a new line before an item that would cross the console's width (an
    item is never broken: "9.0 KiB" stays on one line)."""
    width = console.width - indent
    line = Text()
    for item in items:
        if line.plain and len(line.plain) + 2 + len(item.plain) + 1 > width:  # + 1: the ";" a next item adds
            console.print(Text(" " * indent).append_text(line.append(";")), soft_wrap=True, highlight=False)
            line = Text()
        line = line.append("; ").append_text(item) if line.plain else item.copy()
    if line.plain:
        console.print(Text(" " * indent).append_text(line), soft_wrap=True, highlight=False)


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[Text]], gap: int = 2,
                keys: int = 1, indent: int = 0) -> None:
    """A table that fits the console's width: on one line a row when it can, headings (and ``wrap`` cells)
    wrapped between words when it must, then one space between columns instead of ``gap``, and when even that
    is too wide, a block per row: its first ``keys`` cells on a line (``indent`` columns in), then ``heading
    value; ...`` wrapped below, two columns further in.  A cell is never cut or broken inside a word."""
    widths = None
    for space in dict.fromkeys((gap, 1)):  # the columns closer before a block per row
        widths = table_widths(columns, rows, console.width - space * (len(columns) - 1))
        if widths is not None:
            break
    if widths is None:
        for row in rows:  # a numbered key says what it numbers: "ring 1 heap"
            head = Text(" ").join(Text(f"{col.name} ").append_text(c) if col.right else c
                                  for col, c in zip(columns[:keys], row[:keys], strict=True)
                                  if c.plain not in ("", "-"))
            console.print(Text(" " * indent).append_text(head), overflow="ignore", crop=False)
            _pack(console, [Text(f"{col.name} ").append_text(c) for col, c in zip(columns[keys:], row[keys:],
                                                                                   strict=True)
                            if c.plain not in ("", "-")], indent + 2)
        return
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, space),
                  collapse_padding=True)
    for col, width in zip(columns, widths, strict=True):
        table.add_column(col.name, justify="right" if col.right else "left", width=width, overflow="fold")
    for row in rows:
        table.add_row(*row)
    print_trimmed(console, table)


RING_COLUMNS = (Column("ring", right=True), Column("resource"), Column("capacity", right=True),
                Column("proven need", right=True), Column("need/cap", right=True), Column("high water", right=True),
                Column("live at exit", right=True), Column("largest alloc", right=True), Column("peak site"))
"""The per-ring table of a run: one heading each (the need as a share of capacity is ``need/cap``)."""


def render_run(console: Console, fin: RunFinished, near: float = Thresholds().near) -> None:
    """One run as a header, a per-ring table, wedged scopes and findings; a need at ``near`` of its
    capacity or more is shown in yellow (red from the whole capacity)."""
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
    sentence(console, verdict)
    if log is not None:  # sentences: wrapped at the console's width
        said = describe_log(log) if log.failed else "no failure reported"
        sentence(console, Text(f"host log {log.path}: {said}"))
        if log.ring_sizes is not None:
            rs = log.ring_sizes
            sentence(console, Text("host log ring sizes: " + " ".join(f"{r}={list(rs.of(r))}" for r in RESOURCES)))
    rows: list[list[Text]] = []
    for p in s.peaks:
        if not p.scopes:
            continue
        need = proven_need(p, s).value
        ratio = need / p.capacity if need and p.capacity else None
        style = "red" if ratio is not None and ratio >= 1 else "yellow" if ratio is not None and ratio >= near else ""
        rows.append([Text(str(p.ring)), Text(p.resource),
                     Text("?" if p.capacity is None else fmt_amount(p.resource, p.capacity)),
                     Text(fmt_amount(p.resource, need) if need else "-"),
                     Text("-" if ratio is None else f"{100 * ratio:.1f}%", style=style),
                     *(Text(fmt_amount(p.resource, v)) for v in (p.high_water, p.live_at_exit, p.alloc)),
                     Text(p.high_water_site)])
    tm = s.tensormap
    rows.append([Text("-"), Text("tensormap"), Text("?" if tm.capacity is None else str(tm.capacity)), Text(""),
                 Text(""), Text(str(tm.peak)), Text(""), Text(""), Text(tm.peak_site)])
    if records:
        print_table(console, RING_COLUMNS, rows, keys=2, indent=2)
    if s.wedged:
        console.print("  [bold red]wedged scopes[/] (outermost first; the last is where the run stopped):")
        for w in s.wedged:
            console.print(f"    line {w.line}: {w.site}  depth {w.depth}  ring {w.ring}", markup=False)
    for f in fin.findings:
        line = Text(f.severity, style=_STYLE[f.severity])
        line.append(f" {f.rule}: {f.message}")
        sentence(console, line)
    shown = fin.problems[:10]
    for prob in shown:
        where = f"{fin.source.path}:{prob.line}" if prob.line else fin.source.path
        console.print(f"  {prob.severity} {where}: {prob.message}", markup=False,
                      highlight=False)
    if s.parse_errors > sum(prob.severity == "error" for prob in shown):
        console.print(f"  ({s.parse_errors} parse errors in all)")
    console.print()
