"""The compiled reading core (:mod:`ringtrace.stages._core`, C) plugged into the stages, and the switch
between it and the pure-Python path.

The pure-Python stages, :class:`.decode.Decoder` and :class:`.pair.Pairer`, are the reference; the core
is their twin.  Its scanner takes the lines written exactly as the runtime writes them (the runtime's
key order, plain integers, an ASCII site without escapes) and makes the decoder's checks on them; every
other line (another key order, an escape, a bad value, any line with a problem) is read by the Python
decoder, so every problem keeps its line, reason and message.  Its pairer pairs as :class:`.pair.Pairer`
does, and folds the report's bands as :class:`.bands.Folder` does when asked (``bands``).
:class:`LinkedDecoder` joins them: each line is paired as soon as it is read, in file order,
without a :class:`Record` object unless a sink reads records (``keep_records``).

:data:`COMPILED`: the core was built (``pip install`` compiles it with the machine's C compiler; without
one the install says so in one line) and ``RINGTRACE_PURE`` is not ``1`` (which selects the pure path).
``tests/stages/test_core.py`` feeds both paths the same bytes and requires identical results.
"""

from __future__ import annotations

import os

from ringtrace.model.records import (
    Abandoned,
    Band,
    Bands,
    Meta,
    OpenScope,
    Peak,
    Record,
    RunSummary,
    Scope,
    TensormapPeak,
    UnmatchedEnd,
    Usage,
)
from ringtrace.stages.decode import DEFAULT_RINGS, MAX_LINE, Decoder, Item, _RawRecord
from ringtrace.stages.pair import CappedSummary

try:
    from ringtrace.stages import _core
except ImportError:  # installed without a C compiler
    BUILT = False
else:
    BUILT = True
    _core.bind(Record=Record, Usage=Usage, Scope=Scope, Abandoned=Abandoned, UnmatchedEnd=UnmatchedEnd,
               OpenScope=OpenScope, Peak=Peak, TensormapPeak=TensormapPeak, RunSummary=RunSummary,
               CappedSummary=CappedSummary, Band=Band, Bands=Bands)

PURE_ENV = "RINGTRACE_PURE"
PURE = os.environ.get(PURE_ENV, "") == "1"
"""``RINGTRACE_PURE=1``: every compiled part (this core, the Perfetto encoder) is passed over for its
pure-Python reference."""
COMPILED = BUILT and not PURE
"""Read through the compiled core (the default where it was built); ``RINGTRACE_PURE=1``: the pure path."""


def pairer(meta: Meta | None = None, keep_events: bool = True, bands: int = 0) -> _core.Pairer:
    """A compiled pairer; ``keep_events``: linked pushes keep their events for :meth:`_core.Pairer.take_events`;
    ``bands``: it also folds the run's bands of that width, as :class:`.bands.Folder` does (0: none)."""
    if not BUILT:
        raise RuntimeError("the compiled reading core was not built (no C compiler at install)")
    return _core.Pairer(meta, keep_events, bands)


class LinkedDecoder(Decoder):
    """A :class:`Decoder` whose lines go through the compiled scanner first.

    With a ``pairer``, every record is pushed into it as soon as it is read (those of the scanner and
    those of the Python decoder, in line order), its Meta is given to it, and :meth:`feed` returns
    records only when ``keep_records``; without one it decodes exactly like :class:`Decoder`.
    """

    def __init__(self, pairer: _core.Pairer | None = None, keep_records: bool = True,
                 max_line: int = MAX_LINE) -> None:
        super().__init__(max_line)
        if not BUILT:
            raise RuntimeError("the compiled reading core was not built (no C compiler at install)")
        self.pairer = pairer
        self.keep_records = keep_records or pairer is None
        """Records are among the items :meth:`feed` returns (always without a pairer)."""
        self._scanner = _core.Scanner(pairer, keep_records)
        self._configured: tuple[Meta | None, int] | None = None  # what the scanner was told: (meta, version)
        self._fast = False
        self._batched = False  # the Python decoder's last _lines call read its lines in one batch

    def _ready(self) -> bool:
        """The scanner may take the next line: past line 1, no first line held, a file still read."""
        if self.line < 1 or self._held is not None or self._dead:
            return False
        meta = self.meta
        if self._configured is None or self._configured[0] is not meta or self._configured[1] != self._version:
            rings = len(meta.task_window_max) if meta is not None and meta.task_window_max else DEFAULT_RINGS
            rule = self._rule
            self._fast = self._scanner.configure(rule.wraps, rule.dep_pool, rings,
                                                 meta.heap_max if meta is not None else (), self._max_line)
            self._configured = (meta, self._version)
            self._scanner.load(self._last, self._raw_heap)
        return self._fast

    def _lines(self, buf: bytes, start: int, end: int, out: list[Item]) -> None:
        if self._held is not None:  # line 2 says what the file is: the Python decoder settles it, as alone
            self._settle(buf, start, end, out)
            return
        pos = start
        while pos < end:
            if self._ready():
                pos, lines, records = self._scanner.scan(buf, pos, end, self.line + 1, out)
                self.line += lines
                self.records += records
                if pos >= end:
                    return
            nl = buf.index(b"\n", pos, end)
            self._python(buf[pos:nl], out)
            pos = nl + 1

    def _line(self, raw: bytes, out: list[Item]) -> None:
        if self._ready():
            _, lines, records = self._scanner.scan(raw, 0, len(raw), self.line + 1, out)
            if lines:
                self.line += 1
                self.records += records
                return
        self._python(raw, out)

    def _python(self, raw: bytes, out: list[Item]) -> None:
        """One line through the Python decoder, on the scanner's state."""
        self._scanner.export(self._last, self._raw_heap)
        mark = len(out)
        super()._line(raw, out)
        self._scanner.load(self._last, self._raw_heap)
        self._pair(out, mark)

    def _settle(self, buf: bytes, start: int, end: int, out: list[Item]) -> None:
        """The whole lines of ``buf[start:end]`` after a held first line, read as :class:`Decoder` reads them
        (its batch path releases the held line when line 2 decodes, its line path when line 2 passes the
        checks): by :meth:`Decoder._lines`, whose lines, read one by one, come back through :meth:`_line`."""
        self._batched = False
        mark = len(out)
        super()._lines(buf, start, end, out)
        if self._batched:  # read in one batch by the Python decoder: its records are not paired yet
            self._scanner.load(self._last, self._raw_heap)
            self._pair(out, mark)

    def _batch(self, buf: bytes, start: int, end: int) -> list[_RawRecord] | None:
        raws = super()._batch(buf, start, end)
        self._batched = raws is not None
        return raws

    def _pair(self, out: list[Item], mark: int) -> None:
        """Linked: the Meta and records the Python decoder put in ``out[mark:]`` go to the pairer now, in
        line order (the records stay in ``out`` only when kept)."""
        pairer = self.pairer
        if pairer is None or len(out) == mark:
            return
        made = out[mark:]
        for item in made:
            if type(item) is Meta:
                pairer.meta = item
        records = [item for item in made if type(item) is Record]
        if records:
            pairer.push_linked(records)
            if not self.keep_records:
                out[mark:] = [item for item in made if type(item) is not Record]
