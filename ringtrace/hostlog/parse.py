"""The runtime's host log -> :class:`HostLog`: error codes, the deadlock report, the ring sizes used.

Pure and streaming: :class:`HostLogParser` is fed bytes (any chunking; a partial last line waits
for its newline, or for :meth:`HostLogParser.finish`) and never does I/O, never raises on bad
data (binary garbage, a cut log, lines of any length).  Known lines (formats in the format doc,
"The host log around a failure"):

* ``Ring buffer sizes: task_window=[a, b, c, d] heap=[...] dep_pool=[...]``
* ``PTO2 runtime failed: orch_error_code=N sched_error_code=M runtime_status=K`` (at most one code nonzero)
* ``error detail: orch_error_code=N NAME - text`` or ``error detail: sched_error_code=M NAME - text`` (the
  field that latched), ``error hint: text``, ``PTO2 scheduler timeout sub_class=S1:running-stalled ...``
* a ``FATAL: ...`` block (``report_deadlock`` / ``check_scope_can_accept_task`` / a pool's ``alloc``): the
  ring, ``Requested: N bytes``, ``Task ring R: current=, last_alive=, active=A/S``, ``Heap ring R: top=,
  tail=, size=, used=, available=``, ``ring_id:``, ``Tasks in current scope (A) >= task_window_size (S).``,
  ``scope_depth:``, ``active_tasks: A / S``, ``Pool used: A / S``, ``... exhausted: A entries alive
  (capacity=S).``, ``Needed: N entries``, ``Provable head-of-line deadlock.``, ``Increase ... (current: N,
  recommended: M)`` / ``(e.g. M)``.  The title names the resource: Heap Exhausted, Task Ring Full, Scope
  Deadlock, Dependency Pool (the dep pool), Fanin Spill Pool (the fanin spill pool, sized from
  ``ring_dep_pool``); a ``DepListPool exhausted`` / ``Fanin spill pool exhausted`` line outside a block opens one
* ``Fatal error (code=N)`` / ``Fatal error detected (code=N)`` (the scheduler's lines; the only code when the
  process aborts first)
* ``run status: ...``, ``scope_stats: wrote N records ... to PATH``, ``PATH NOT WRITTEN`` / ``PATH not produced``

Codes are named from the runtime's enum (:data:`ringtrace.model.runtime.ERROR_CODES`) when the detail line
does not name them; a code outside it keeps its number and no name.  ``Ring buffer sizes:`` is written
only at INFO level and is never required.  Anything else is ignored.  A known line that does not parse
is a :class:`Problem` with its line number.

L3 logs: a line tagged ``[rank N]`` (also ``[rankN]``, ``[rank=N]``) or naming a ``rank<N>/d<K>/`` path
belongs to that rank (lines of a ``FATAL:`` block follow the block's first line); :meth:`finish`
returns one :class:`HostLog` per rank seen, plus one for the untagged lines when they say anything.
"""

from __future__ import annotations

import re

import msgspec

from ringtrace.model.records import (
    Deadlock,
    HostLog,
    Problem,
    RingSizes,
    Severity,
)
from ringtrace.model.runtime import RESOURCES, error_name

MAX_LINE = 64 << 10
"""Longer lines are cut to this many bytes before matching (a log line worth reading is short)."""
MAX_KEPT = 50
"""Fatal, run-status and not-written lines kept per log; problems kept (all are found)."""

_TRIGGERS = (b"Ring buffer sizes:", b"PTO2 runtime failed:", b"error detail:", b"error hint:", b"FATAL:",
             b"Fatal error", b"run status:", b"scope_stats: wrote", b"NOT WRITTEN", b"not produced", b" FAILED: ",
             b"scheduler timeout sub_class=", b"DepListPool exhausted", b"Fanin spill pool exhausted")
_TRIGGER = re.compile(b"|".join(re.escape(t) for t in _TRIGGERS))
"""A line without any of these is skipped unread (outside a FATAL block)."""
_PREFIX = re.compile(r"^(?P<brackets>(?:\s*\[[^\]\n]*\])*)\s*(?:(?P<func>[^\s\[\]]+): \[[^\]\s]+:\d+\]\s?)?")
_RANK_TAG = re.compile(r"\[rank[ =]?(\d+)\]")
_RANK_PATH = re.compile(r"(?:^|[/\\])rank(\d+)[/\\]d(\d+)(?:[/\\]|$)")
_INTS = r"\[\s*(-?\d+(?:\s*,\s*-?\d+)*)\s*\]"
_SIZES = re.compile(r"^Ring buffer sizes: " + " ".join(f"{r}={_INTS}" for r in RESOURCES) + r"\s*$")
"""The runtime's sizes line: one list per resource of :data:`~ringtrace.model.runtime.TABLE`, in its order."""
_FAILED = re.compile(r"^PTO2 runtime failed: orch_error_code=(-?\d+)(?: sched_error_code=(-?\d+))?"
                     r"(?: runtime_status=(-?\d+))?")
_DETAIL = re.compile(r"^error detail: (orch|sched)_error_code=(-?\d+) ([A-Za-z][A-Za-z0-9_]*)(?: \([^)]*\))?"
                     r"(?: - (.*))?$")
_TIMEOUT = re.compile(r"(?:PTO2 )?scheduler timeout sub_class=(\S+)")
_FATAL_CODE = re.compile(r"Fatal error (?:detected )?\(code=(-?\d+)\)")
_WROTE = re.compile(r"^scope_stats: wrote (\d+) records \(dropped=\d+\) to (\S.*)$")
_NOT_WRITTEN = re.compile(r"(\S+)\s+(?:was\s+)?(?:NOT WRITTEN|not produced)\b")
_TASK_RING = re.compile(r"^Task ring (\d+): current=(-?\d+), last_alive=(-?\d+)(?:, active=(\d+)/(\d+))?")
_HEAP_RING = re.compile(r"^Heap ring (\d+): top=(\d+), tail=(\d+), size=(\d+)(?:, used=(\d+))?(?:, available=(-?\d+))?")
_REQUESTED = re.compile(r"^Requested:\s+(\d+) bytes")
_RING_ID = re.compile(r"^ring_id:\s+(\d+)")
_POOL_USED = re.compile(r"^Pool used:\s+(\d+) / (\d+)")
_NEEDED = re.compile(r"^Needed:\s+(\d+) entries")
_EXHAUSTED = re.compile(r"^(?:DepListPool|Fanin spill pool) exhausted: (\d+) entries alive \(capacity=(\d+)\)")
_SCOPE_TASKS = re.compile(r"^Tasks in current scope \((\d+)\) >= task_window_size \((\d+)\)")
_FIELD = re.compile(r"^(scope_depth|scope_task_count|active_tasks):\s+(\d+)(?:\s*/\s*(\d+))?")
_CURRENT = re.compile(r"\(current: (\d+)(?:, recommended: (\d+))?\)")
_EXAMPLE = re.compile(r"\(e\.g\. (\d+)\)")
_STEP = re.compile(r"^\d+\.\s+")
_CASE_FAILED = re.compile(r"^\S+ FAILED: ")
_TITLE_RING = re.compile(r"ring[= ](\d+)|\(ring (\d+)\)")
_KINDS = (("Heap Exhausted", "heap"), ("Task Ring Full", "task_window"), ("Scope Deadlock", "scope"),
          ("Fanin Spill Pool", "fanin_pool"), ("Fanin spill pool", "fanin_pool"), ("Dependency Pool", "dep_pool"),
          ("DepListPool", "dep_pool"))


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(","))


class _Facts:
    """Mutable facts of one rank (or of the untagged lines) while a log is read."""

    def __init__(self) -> None:
        self.orch_code: int | None = None
        self.sched_code: int | None = None
        self.status: int | None = None
        self.name: str | None = None  # the detail line's name for orch_code
        self.sched_name: str | None = None  # the detail line's name for sched_code
        self.detail: str | None = None
        self.sub_class: str | None = None
        self.timeout: str | None = None
        self.hint: str | None = None
        self.fatal_code: int | None = None
        self.deadlock: dict[str, object] | None = None
        self.sizes: RingSizes | None = None
        self.fatal_lines: list[str] = []
        self.run_status: list[str] = []
        self.not_written: list[str] = []
        self.written: list[str] = []
        self.dispatch: int | None = None
        self.touched = False

    def build(self, path: str, lines: int, rank: int | None, problems: tuple[Problem, ...]) -> HostLog:
        code, source = (self.orch_code, "orch_error_code") if self.orch_code is not None else (
            (self.fatal_code, "fatal_error") if self.fatal_code is not None else (None, None))
        name = self.name if self.name is not None and self.orch_code == code else error_name(code)
        sched_name = self.sched_name if self.sched_name is not None else error_name(self.sched_code)
        deadlock = msgspec.convert(self.deadlock, Deadlock) if self.deadlock is not None else None
        return HostLog(path, lines, rank, self.dispatch, code, source, name, self.detail, self.hint,
                       self.sched_code, self.status, self.fatal_code, deadlock, self.sizes,
                       tuple(self.fatal_lines), tuple(self.run_status), tuple(self.not_written),
                       tuple(self.written), problems, sched_name, self.sub_class, self.timeout)


class HostLogParser:
    """Feed a host log's bytes in order; :meth:`result` / :meth:`finish` say what it reported.

    Memory: the facts (kept lists are capped at :data:`MAX_KEPT`) plus one partial line of at most
    :data:`MAX_LINE` bytes.  Single-threaded; never raises for any input.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines = 0
        self._pending = bytearray()
        self._skipping = False  # inside an over-long line: drop bytes until its newline
        self._facts: dict[int | None, _Facts] = {None: _Facts()}
        self._problems: list[Problem] = []
        # the open FATAL block: (function, rank, recorded: False for a later report, which is skipped)
        self._block: tuple[str, int | None, bool] | None = None

    def feed(self, data: bytes) -> None:
        """Consume ``data``; complete lines are parsed now, a partial last line is held back."""
        pos = 0
        if self._pending or self._skipping:  # the rest of a held-back line first
            nl = data.find(b"\n")
            if nl < 0:
                self._take(data)
                return
            self._take(data[:nl])
            self._flush_line()
            pos = nl + 1
        end = data.rfind(b"\n") + 1  # data[pos:end] are whole lines
        nexts = [data.find(t, pos, end) for t in _TRIGGERS]  # next occurrence of each trigger (-1: none)
        while pos < end:
            if self._block is None:  # jump to the next line that may say something (C-level searches)
                hit = -1
                for i, n in enumerate(nexts):
                    if 0 <= n < pos:
                        n = nexts[i] = data.find(_TRIGGERS[i], pos, end)
                    if n >= 0 and (hit < 0 or n < hit):
                        hit = n
                if hit < 0:
                    self.lines += data.count(b"\n", pos, end)
                    pos = end
                    break
                start = max(pos, data.rfind(b"\n", pos, hit) + 1)
                self.lines += data.count(b"\n", pos, start)
                pos = start
            nl = data.find(b"\n", pos, end)
            self.lines += 1
            self._raw(data[pos:min(nl, pos + MAX_LINE)])
            pos = nl + 1
        self._take(data[max(pos, end):])

    def skip(self, nbytes: int) -> None:
        """The caller leaves out the log's next ``nbytes`` bytes (the middle of a log over the reader's cap).

        A held-back partial line and an open ``FATAL:`` block end here; the bytes fed next up to their
        first newline (the rest of a cut line) are dropped; a ``skipped`` warning says what was left out.
        Line numbers after it count only the lines read."""
        self._pending.clear()
        self._block = None
        self._skipping = True
        self._problem("skipped", f"{nbytes} bytes after line {self.lines} were not read (the log is over the "
                      "reader's cap): a failure reported there is missed; later line numbers count only the "
                      "lines read", "warning")

    def feed_line(self, line: bytes | str) -> None:
        """One complete line (without its newline)."""
        self.feed((line.encode("utf-8", "replace") if isinstance(line, str) else line) + b"\n")

    def finish(self) -> tuple[HostLog, ...]:
        """Parse a held-back last line (a cut log) and return :meth:`result`."""
        if self._pending or self._skipping:
            self._flush_line()
            self._problem("truncated", "the last line has no newline: the log is cut or still being written",
                          "warning")
        return self.result()

    def result(self) -> tuple[HostLog, ...]:
        """One :class:`HostLog` per rank the lines name (ascending), preceded by the untagged lines'
        one when it says anything or no rank was named.  Problems go with the untagged one."""
        probs = tuple(self._problems)
        ranked = sorted(r for r in self._facts if r is not None)
        out: list[HostLog] = []
        untagged = self._facts[None]
        if untagged.touched or not ranked:
            out.append(untagged.build(self.path, self.lines, None, probs))
            probs = ()
        for i, rank in enumerate(ranked):
            out.append(self._facts[rank].build(self.path, self.lines, rank, probs if i == 0 else ()))
        return tuple(out)

    # -- lines ------------------------------------------------------------------------------------

    def _take(self, part: bytes) -> None:
        if self._skipping or not part:
            return
        room = MAX_LINE - len(self._pending)
        if len(part) > room:
            self._pending += part[:room]
            self._skipping = True
        else:
            self._pending += part

    def _flush_line(self) -> None:
        self.lines += 1
        raw = bytes(self._pending)
        self._pending.clear()
        self._skipping = False
        self._raw(raw)

    def _raw(self, raw: bytes) -> None:
        if self._block is None and _TRIGGER.search(raw) is None:
            return  # most lines: nothing the parser reads (decided on the bytes, cheaply)
        try:
            self._line(raw.decode("utf-8", "replace").rstrip("\r"))
        except Exception as err:  # a defect here must not lose the rest of the log
            self._problem("internal_error", f"line could not be read: {err!r}")

    def _problem(self, reason: str, message: str, severity: Severity = "error") -> None:
        if len(self._problems) < MAX_KEPT:
            self._problems.append(Problem(self.lines, reason, message, severity))

    def _line(self, line: str) -> None:
        m = _PREFIX.match(line)
        assert m is not None  # every part of the pattern is optional
        msg = line[m.end():].strip()
        func = m.group("func")
        brackets = m.group("brackets") or ""
        tag = _RANK_TAG.search(brackets) if "rank" in brackets else None
        rank = int(tag.group(1)) if tag else None
        path_rank = _RANK_PATH.search(msg) if "rank" in msg else None
        if rank is None and path_rank is not None:
            rank = int(path_rank.group(1))
        if self._block is not None:
            if func == self._block[0] and not msg.startswith("FATAL:"):
                if rank is None:
                    rank = self._block[1]
                if self._block[2]:
                    self._block_line(self._facts_for(rank), msg)
                return
            self._block = None
        facts = self._facts_for(rank)
        if path_rank is not None and int(path_rank.group(1)) == rank:
            facts.dispatch = int(path_rank.group(2))
        if msg.startswith("FATAL:"):
            self._fatal(facts, msg, func, rank)
        elif msg.startswith("Ring buffer sizes:"):
            self._sizes(facts, msg)
        elif msg.startswith("PTO2 runtime failed:"):
            self._failed(facts, msg)
        elif msg.startswith("error detail:"):
            self._detail(facts, msg)
        elif "scheduler timeout sub_class=" in msg:
            t = _TIMEOUT.search(msg)
            if t is None:
                self._problem("malformed_host_log", f"unreadable 'scheduler timeout' line: {_cut(msg)}")
            else:
                facts.sub_class, facts.timeout = t.group(1), _cut(msg, 500)
                facts.touched = True
        elif msg.startswith(("DepListPool exhausted", "Fanin spill pool exhausted")):
            self._fatal(facts, msg, func, rank, opened_by="exhausted")
            if self._block is not None and self._block[2]:
                self._block_line(facts, msg)
        elif msg.startswith("error hint:"):
            facts.hint = msg[len("error hint:"):].strip()
            facts.touched = True
        elif msg.startswith("run status:") or _CASE_FAILED.match(msg):
            _keep(facts.run_status, msg[len("run status:"):].strip() if msg.startswith("run status:") else msg)
            facts.touched = True
        elif msg.startswith("scope_stats: wrote "):
            w = _WROTE.match(msg)
            if w is None:
                self._problem("malformed_host_log", f"unreadable 'scope_stats: wrote' line: {_cut(msg)}")
            else:
                _keep(facts.written, w.group(2).strip())
                facts.touched = True
        if "Fatal error (code=" in msg or "Fatal error detected (code=" in msg:
            f = _FATAL_CODE.search(msg)
            if f is None:
                self._problem("malformed_host_log", f"'Fatal error' line without an integer code: {_cut(msg)}")
            else:
                facts.fatal_code = int(f.group(1))
                _keep(facts.fatal_lines, msg)
                facts.touched = True
        if "NOT WRITTEN" in msg or " not produced" in msg:
            n = _NOT_WRITTEN.search(msg)
            _keep(facts.not_written, n.group(1) if n else msg)
            facts.touched = True

    def _facts_for(self, rank: int | None) -> _Facts:
        facts = self._facts.get(rank)
        if facts is None:
            facts = self._facts[rank] = _Facts()
        return facts

    def _sizes(self, facts: _Facts, msg: str) -> None:
        m = _SIZES.match(msg)
        if m is None:
            self._problem("malformed_host_log", f"unreadable 'Ring buffer sizes' line: {_cut(msg)}")
            return
        sizes = {r: _ints(g) for r, g in zip(RESOURCES, m.groups(), strict=True)}
        facts.sizes = msgspec.convert({**sizes, "line": self.lines}, RingSizes)
        facts.touched = True

    def _failed(self, facts: _Facts, msg: str) -> None:
        m = _FAILED.match(msg)
        if m is None:
            self._problem("malformed_host_log", f"'runtime failed' line without an integer code: {_cut(msg)}")
            return
        facts.orch_code = int(m.group(1))
        facts.sched_code = int(m.group(2)) if m.group(2) else facts.sched_code
        facts.status = int(m.group(3)) if m.group(3) else facts.status
        facts.touched = True

    def _detail(self, facts: _Facts, msg: str) -> None:
        m = _DETAIL.match(msg)
        if m is None:
            self._problem("malformed_host_log", f"unreadable 'error detail' line: {_cut(msg)}")
            return
        code, name, text = int(m.group(2)), m.group(3), (m.group(4) or "").strip() or None
        if m.group(1) == "orch":
            if facts.orch_code is None:
                facts.orch_code = code
            if code == facts.orch_code:
                facts.name, facts.detail = name, text
        else:
            if facts.sched_code is None:
                facts.sched_code = code
            if code == facts.sched_code:
                facts.sched_name = name
                if not facts.orch_code:  # the latched code's text (the runtime writes one detail line)
                    facts.detail = text
        facts.touched = True

    def _fatal(self, facts: _Facts, msg: str, func: str | None, rank: int | None, opened_by: str = "FATAL:") -> None:
        """A ``FATAL:`` title opens a block; so does a pool's ``... exhausted:`` line outside one."""
        if opened_by == "FATAL:":
            _keep(facts.fatal_lines, msg)
        facts.touched = True
        first = facts.deadlock is None  # the first report is the cause; later ones are echoes
        self._block = (func or "", rank, first)
        if not first:
            return
        kind = next((k for text, k in _KINDS if text in msg), "other")
        t = _TITLE_RING.search(msg)
        ring = int(t.group(1) or t.group(2)) if t else None
        title = msg[len("FATAL:"):].strip() if opened_by == "FATAL:" else msg
        facts.deadlock = {"kind": kind, "line": self.lines, "title": title, "ring": ring}

    def _block_line(self, facts: _Facts, msg: str) -> None:
        d = facts.deadlock
        if d is None:
            return
        body = _STEP.sub("", msg.lstrip("- ").strip())
        if body.startswith("Task ring "):
            m = _TASK_RING.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'Task ring' line: {_cut(body)}")
                return
            if d["ring"] is None:
                d["ring"] = int(m.group(1))
            d["task_current"], d["task_last_alive"] = int(m.group(2)), int(m.group(3))
            if m.group(4):
                d["task_active"], d["task_size"] = int(m.group(4)), int(m.group(5))
        elif body.startswith("Heap ring "):
            m = _HEAP_RING.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'Heap ring' line: {_cut(body)}")
                return
            if d["ring"] is None:
                d["ring"] = int(m.group(1))
            d["heap_top"], d["heap_tail"], d["heap_size"] = int(m.group(2)), int(m.group(3)), int(m.group(4))
            d["heap_used"] = int(m.group(5)) if m.group(5) else None
            d["heap_available"] = int(m.group(6)) if m.group(6) else None
        elif body.startswith("Requested:"):
            m = _REQUESTED.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'Requested' line: {_cut(body)}")
                return
            d["requested_bytes"] = int(m.group(1))
        elif body.startswith("ring_id:"):
            m = _RING_ID.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'ring_id' line: {_cut(body)}")
                return
            d["ring"] = int(m.group(1))
        elif body.startswith("Pool used:"):
            m = _POOL_USED.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'Pool used' line: {_cut(body)}")
                return
            d["pool_used"], d["pool_size"] = int(m.group(1)), int(m.group(2))
        elif body.startswith("Needed:"):
            m = _NEEDED.match(body)
            if m is not None:
                d["pool_needed"] = int(m.group(1))
        elif body.startswith("Provable head-of-line deadlock"):
            d["provable"] = True
        elif body.startswith("No reclaim progress") or "cannot reclaim space after" in body:
            d["backstop"] = True
        elif body.startswith(("DepListPool exhausted", "Fanin spill pool exhausted")):
            m = _EXHAUSTED.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'pool exhausted' line: {_cut(body)}")
                return
            d["pool_used"], d["pool_size"] = int(m.group(1)), int(m.group(2))
        elif body.startswith("Tasks in current scope"):
            m = _SCOPE_TASKS.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable 'Tasks in current scope' line: {_cut(body)}")
                return
            d["scope_tasks"], d["task_size"] = int(m.group(1)), int(m.group(2))
        elif body.startswith(("scope_depth:", "scope_task_count:", "active_tasks:")):
            m = _FIELD.match(body)
            if m is None:
                self._problem("malformed_host_log", f"unreadable '{body.split(':')[0]}' line: {_cut(body)}")
                return
            if m.group(1) == "scope_depth":
                d["scope_depth"] = int(m.group(2))
            elif m.group(1) == "scope_task_count":
                d["scope_tasks"] = int(m.group(2))
            else:
                d["task_active"] = int(m.group(2))
                if m.group(3):
                    d["task_size"] = int(m.group(3))
        elif body.startswith("Increase ") and d.get("suggestion") is None:
            d["suggestion"] = body
            self._suggested(d, body)


    @staticmethod
    def _suggested(d: dict[str, object], body: str) -> None:
        """``Increase heap (current: N); ... (e.g. M)``, ``Increase task window (current: N)``, ``Increase
        dep pool capacity (current: N, recommended: M)``: the size the ring ran with (where no other line
        said it) and the one suggested."""
        cur = _CURRENT.search(body)
        field = ("heap_size" if body.startswith("Increase heap") else "task_size" if body.startswith(
            "Increase task window") else "pool_size" if " pool capacity" in body else None)
        if cur is not None and field is not None and d.get(field) is None:
            d[field] = int(cur.group(1))
        example = _EXAMPLE.search(body)
        recommended = cur.group(2) if cur is not None and cur.group(2) else example.group(1) if example else None
        if recommended is not None:
            d["recommended"] = int(recommended)


def _keep(kept: list[str], text: str) -> None:
    if len(kept) < MAX_KEPT:
        kept.append(_cut(text, 500))


def _cut(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[:n] + "..."


def parse_host_log(path: str, data: bytes) -> tuple[HostLog, ...]:
    """A whole log at once (``HostLogParser`` fed ``data``, then finished)."""
    p = HostLogParser(path)
    p.feed(data)
    return p.finish()
