"""The compiled reading core (:mod:`ringtrace.stages._core`, C) plugged into the stages, and the switch
between it and the pure-Python path.

The pure-Python stages, :class:`.decode.Decoder` and :class:`.pair.Pairer`, are the reference; the core
is their twin.  Its scanner takes the lines written exactly as the runtime writes them (the runtime's
key order, plain integers, an ASCII site without escapes) and makes the decoder's checks on them; every
other line (another key order, an escape, a bad value, any line with a problem) is read by the Python
decoder, so every problem keeps its line, reason and message.  Its pairer pairs as :class:`.pair.Pairer`
does, and folds the report's bands as :class:`.bands.Folder` does when asked (``bands``).
:class:`Linked` joins them as a decoder's :class:`~ringtrace.stages.decode.LineScanner`: each line is paired
as soon as it is read, in file order, without a :class:`Record` object unless a sink reads records
(``keep_records``).

:data:`COMPILED`: the core was built (``pip install`` compiles it with the machine's C compiler; without
one the install says so in one line) and ``RINGTRACE_PURE`` is not ``1`` (which selects the pure path).
``tests/stages/test_core.py`` feeds both paths the same bytes and requires identical results.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING

from ringtrace.config import pure_path
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
from ringtrace.stages.decode import MAX_LINE, Decoder, Item, Version
from ringtrace.stages.pair import CappedSummary

if TYPE_CHECKING:
    from ringtrace.stages import _core

BUILT = importlib.util.find_spec("ringtrace.stages._core") is not None
"""The core was built (where the install had no C compiler it was not).  Found, not loaded: it is loaded where a
run first reads through it (:func:`compiled_module`), so the pure path never loads it (nor one built from other
tables: a fourth resource's build stops at its ``_Static_assert``, docs/design.md, "Ring resources")."""


@functools.cache
def compiled_module() -> ModuleType:
    """The compiled core, loaded and given the types it makes, once."""
    from ringtrace.stages import _core

    _core.bind(Record=Record, Usage=Usage, Scope=Scope, Abandoned=Abandoned, UnmatchedEnd=UnmatchedEnd,
               OpenScope=OpenScope, Peak=Peak, TensormapPeak=TensormapPeak, RunSummary=RunSummary,
               CappedSummary=CappedSummary, Band=Band, Bands=Bands)
    return _core


COMPILED = BUILT and not pure_path()
"""Read through the compiled core (the default where it was built); ``RINGTRACE_PURE=1``: the pure path."""


def pairer(meta: Meta | None = None, keep_events: bool = True, bands: int = 0) -> _core.Pairer:
    """A compiled pairer; ``keep_events``: linked pushes keep their events for :meth:`_core.Pairer.take_events`;
    ``bands``: it also folds the run's bands of that width, as :class:`.bands.Folder` does (0: none)."""
    if not BUILT:
        raise RuntimeError("the compiled reading core was not built (no C compiler at install)")
    made: _core.Pairer = compiled_module().Pairer(meta, keep_events, bands)
    return made


class Linked:
    """The compiled scanner as the :class:`~ringtrace.stages.decode.LineScanner` of a
    :class:`~ringtrace.stages.decode.Decoder`.

    With a ``pairer``, every record is pushed into it as soon as it is read (those of the scanner and those
    the decoder reads itself, in line order), and the decoder's Meta is given to it; records stay among the
    decoder's items only when ``keep_records`` (always without a pairer).
    """

    def __init__(self, pairer: _core.Pairer | None = None, keep_records: bool = True) -> None:
        if not BUILT:
            raise RuntimeError("the compiled reading core was not built (no C compiler at install)")
        self.pairer = pairer
        self.keep_records = keep_records or pairer is None
        self._scanner: _core.Scanner = compiled_module().Scanner(pairer, keep_records)
        self.scan = self._scanner.scan
        self.export = self._scanner.export
        self.load = self._scanner.load

    def configure(self, rule: Version, rings: int, heap_max: Sequence[int], max_line: int) -> bool:
        # the core carries TABLE's three resources (its _Static_assert), of which a version may lack only the
        # last, the dep pool: it requires it where the version carries every one
        return self._scanner.configure(rule.wraps, all(rule.carried), rings, heap_max, max_line)

    def decoded(self, out: list[Item], mark: int) -> None:
        """Linked: the Meta and records the decoder put in ``out[mark:]`` go to the pairer now, in line order
        (the records stay in ``out`` only when kept)."""
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


def linked_decoder(pairer: _core.Pairer | None = None, keep_records: bool = True, max_line: int = MAX_LINE
                   ) -> Decoder:
    """A :class:`Decoder` whose lines go through the compiled scanner first (:class:`Linked`)."""
    return Decoder(max_line, scanner=Linked(pairer, keep_records))
