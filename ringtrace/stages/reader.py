"""One run's bytes read into items and paired scopes: the seam between the compiled reading core and the
pure-Python stages, :class:`Reader`, and the two readers that implement it.

:class:`PureReader` is the reference (:class:`.decode.Decoder`, :class:`.pair.Pairer` and, for the report's
bands, :class:`.bands.Folder`); :class:`CompiledReader` reads through the compiled core (a decoder whose lines
go through its scanner first, paired as they are read: :mod:`ringtrace.stages.core`).  :func:`reader` picks one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import msgspec

from ringtrace.model.records import Bands, Meta, PairEvent, Record, RunSummary, Usage, Wants
from ringtrace.stages import core
from ringtrace.stages.bands import Folder
from ringtrace.stages.decode import Decoder, Item
from ringtrace.stages.pair import Pairer

if TYPE_CHECKING:
    from ringtrace.stages import _core


class Step(msgspec.Struct, frozen=True):
    """What one :meth:`Reader.feed` or :meth:`Reader.finish` read."""

    items: list[Item]
    """Meta, Problem and (when the reader :attr:`~Reader.keeps_records`) Record items, in line order."""
    records: int
    """Records read, every one of them paired already."""
    events: list[PairEvent]
    """Their pair events, in order (none unless the sinks want events)."""


class Reader(Protocol):
    """Decodes and pairs one run's bytes, fed in order; single-threaded, never raises for bad data.

    The contract both paths keep, to the byte (``tests/stages/test_core.py``, the property tests):

    * :meth:`feed` takes the next chunk, :meth:`finish` says the file is done (``cut``: rewritten or
      deleted under the reader, so a last line without its newline is dropped); each returns a :class:`Step`:
      the items :class:`~ringtrace.stages.decode.Decoder` gives for those bytes (its records only when
      :attr:`keeps_records`), how many records were read, and the events their pairing made (in order).
    * :attr:`decoder` counts lines, records and parse errors, and holds the metadata and held-back bytes.
    * :attr:`pairer` pairs (``records``, ``open_scopes``); :meth:`summary`, :meth:`open_usage` and
      :meth:`bands` are those of every record read so far; :attr:`last_line` is the last record's line.
    """

    decoder: Decoder
    keeps_records: bool

    @property
    def pairer(self) -> Pairer | _core.Pairer: ...

    @property
    def last_line(self) -> int: ...

    def feed(self, chunk: bytes) -> Step: ...

    def finish(self, cut: bool = False) -> Step: ...

    def summary(self, finished: bool = False) -> RunSummary: ...

    def open_usage(self) -> tuple[tuple[Usage | None, ...], ...]: ...

    def bands(self) -> Bands | None: ...


_NONE: list[PairEvent] = []


class PureReader:
    """:class:`Reader` on the pure-Python stages: the reference."""

    keeps_records = True

    def __init__(self, wants: Wants) -> None:
        self.decoder = Decoder()
        self.pairer = Pairer()
        self.last_line = 0
        self._folder = Folder(wants.bands) if wants.bands else None

    def feed(self, chunk: bytes) -> Step:
        return self._paired(self.decoder.feed(chunk))

    def finish(self, cut: bool = False) -> Step:
        return self._paired(self.decoder.finish(cut))

    def _paired(self, items: list[Item]) -> Step:
        records = [item for item in items if type(item) is Record]
        if len(records) != len(items):
            for item in items:
                if isinstance(item, Meta):
                    self.pairer.meta = item
        if not records:
            return Step(items, 0, _NONE)
        events = self.pairer.push_many(records)
        self.last_line = records[-1].line
        if self._folder is not None:
            self._folder.push(records, events, self.decoder.meta)
        return Step(items, len(records), events)

    def summary(self, finished: bool = False) -> RunSummary:
        return self.pairer.summary(self.decoder.parse_errors, finished)

    def open_usage(self) -> tuple[tuple[Usage | None, ...], ...]:
        return self.pairer.open_usage()

    def bands(self) -> Bands | None:
        return self._folder.bands() if self._folder is not None else None


class CompiledReader:
    """:class:`Reader` through the compiled core: the decoder's lines go through its scanner first and every
    record is paired as it is read, with no Record or event object unless the sinks read them (``wants``)."""

    def __init__(self, wants: Wants) -> None:
        self.pairer = core.pairer(keep_events=wants.events, bands=wants.bands)
        self.keeps_records = wants.records
        self.decoder = core.linked_decoder(self.pairer, keep_records=wants.records)

    @property
    def last_line(self) -> int:
        return self.pairer.last_line

    def feed(self, chunk: bytes) -> Step:
        before = self.decoder.records
        items = self.decoder.feed(chunk)
        return Step(items, self.decoder.records - before, self.pairer.take_events())

    def finish(self, cut: bool = False) -> Step:
        before = self.decoder.records
        items = self.decoder.finish(cut)
        return Step(items, self.decoder.records - before, self.pairer.take_events())

    def summary(self, finished: bool = False) -> RunSummary:
        return self.pairer.summary(self.decoder.parse_errors, finished)

    def open_usage(self) -> tuple[tuple[Usage | None, ...], ...]:
        return self.pairer.open_usage()

    def bands(self) -> Bands | None:
        return self.pairer.bands()


def reader(wants: Wants, compiled: bool | None = None) -> Reader:
    """The compiled reader (True), the pure one (False), or whichever :data:`ringtrace.stages.core.COMPILED`
    says (None)."""
    return CompiledReader(wants) if (core.COMPILED if compiled is None else compiled) else PureReader(wants)
