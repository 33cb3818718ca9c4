"""Bytes -> :class:`Meta` | :class:`Record` | :class:`Problem`, incrementally.

Pure and synchronous: no I/O, no clock.  The caller (``tail`` or ``summary``) owns the file
and feeds whatever byte chunks it read, in order; a last line without its newline is held
back until it is completed, or until :meth:`Decoder.finish` says the file is done.
Memory is O(longest line + rings), never O(file).

Versions 4, 5 and 6 are read; a newer version is read as 6 with a warning.  In versions 4
and 5 the heap counters wrap modulo ``heap_max[ring]``; they are unrolled per ring into
monotonic counters (assuming less than one capacity was allocated between two samples of
the same ring), so every :class:`Record` carries monotonic heap counters.

The runtime writes ``site`` without JSON escaping; a record that is invalid JSON only because
of its site (a ``"`` in the file name, a UTF-8 character cut by the 31-byte limit) is repaired
and read, with one ``unescaped_site`` warning per file (not a parse error).

Hostile or corrupt lines are per-line errors, never exceptions: JSON nested too deeply for the
decoder (``nested_too_deep``), numbers that are not integers or not finite (``NaN``,
``Infinity``, ``1e999``: invalid JSON or ``invalid_record``), counters outside 0..2**63-1, and a
metadata line with a string ``version``, a ``null`` field or a negative ``dropped``/``total``/
capacity (``bad_metadata``: the metadata is then unknown).  A UTF-8 byte order mark before the
metadata line is skipped with a ``bom`` warning.
"""


import functools
from collections.abc import Sequence
from typing import Annotated, Any, Literal, NamedTuple, Protocol, cast

import msgspec

from ringtrace.model.records import Meta, Problem, Record
from ringtrace.model.runtime import TABLE, unrolled

MAX_LINE = 1 << 20
"""Lines longer than this (1 MiB) are skipped with a ``line_too_long`` error."""
MAX_DEPTH = 64
"""The runtime caps depth at 64."""


class Version(NamedTuple):
    """How the records of one scope_stats version are read: the rule the decoder and the compiled scanner
    (``Scanner.configure``) both follow."""

    wraps: bool
    """The heap counters (the contiguous resource's: ``Resource.contiguous``) wrap modulo ``heap_max[ring]``:
    unrolled per ring into monotonic ones."""
    carried: tuple[bool, ...]
    """Per resource of :data:`~ringtrace.model.runtime.TABLE`, in its order: the records carry its ``*_start``/
    ``*_end``, required (a resource newer than the version, the dep pool in version 4: read as None if present)."""


VERSIONS: dict[int, Version] = {v: Version(wraps=wraps, carried=tuple(v >= r.since_version for r in TABLE))
                                for v, wraps in ((4, True), (5, True), (6, False))}
"""The versions read, each with its rule; a newer version is read by the newest one's rule (with a warning)."""
SUPPORTED_VERSIONS = range(min(VERSIONS), max(VERSIONS) + 1)


def version_rule(version: int) -> Version:
    """The rule ``version`` (at least the oldest supported) is read by."""
    return VERSIONS[min(version, SUPPORTED_VERSIONS.stop - 1)]

DEFAULT_RINGS = 4
INT64_MAX = (1 << 63) - 1
"""Largest counter read: every figure fits the int64 fields of Perfetto and OTLP."""
BOM = b"\xef\xbb\xbf"
[_WRAPPED] = [r for r in TABLE if r.contiguous]  # the heap: the one resource versions 4-5 wrote wrapped
_ALWAYS = tuple(r for r in TABLE if not r.optional)  # in every version's records (SUPPORTED_VERSIONS.start)


def rings_of(meta: Meta | None) -> int:
    """The rings a file has: as many as its metadata gives capacities for (the first resource's, which every
    version has), else :data:`DEFAULT_RINGS`."""
    caps = meta.maxes(TABLE[0].name) if meta is not None else ()
    return len(caps) if caps else DEFAULT_RINGS


Item = Meta | Record | Problem

_Count = Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)]
_Counter = Annotated[int, msgspec.Meta(le=INT64_MAX)]  # negatives are checked (and named) in Python


class LineScanner(Protocol):
    """A faster reader of the record lines, which a :class:`Decoder` offers its lines to first: the seam between
    the compiled reading core (:class:`ringtrace.stages.core.Linked`) and this pure-Python reference.

    The contract, which makes a decoder with a scanner give exactly the items, counters and problems of one
    without (``tests/stages/test_core.py``):

    * :meth:`configure` is called with each file's metadata, as the decoder read it, and its version's rule
      (:data:`VERSIONS`) before a line is offered; False: offer no line until the next call.
    * :meth:`scan` takes whole lines of ``buf[start:end]`` in order from ``start`` (the first is number ``line``):
      only lines that the decoder would read as one Record and nothing else (no problem, no warning), checked
      against the same per-ring state; it stops at the first line it does not take and returns
      ``(where that line starts, lines taken, records made)``.
    * The decoder reads every other line itself, between :meth:`export` (the scanner's per-ring state into the
      decoder's: the latest record of each ring, the v4/v5 raw heap heads) and :meth:`load` (back), and hands the
      items it made (``out[mark:]``, in line order) to :meth:`decoded`.
    * The records of either, and the metadata, are the scanner's to use (the compiled one pairs them as they are
      read); they stay in ``out`` unless it removes them (:meth:`scan` does not append, :meth:`decoded` cuts them).
    """

    def configure(self, rule: Version, rings: int, heap_max: Sequence[int], max_line: int) -> bool: ...

    def scan(self, buf: bytes, start: int, end: int, line: int, out: list[Item]) -> tuple[int, int, int]: ...

    def export(self, last: dict[int, Record], raw_heap: dict[int, int]) -> None: ...

    def load(self, last: dict[int, Record], raw_heap: dict[int, int]) -> None: ...

    def decoded(self, out: list[Item], mark: int) -> None: ...


class _RawMetaFixed(msgspec.Struct):
    """The metadata line's keys besides the capacities (:data:`_RawMeta` adds one list per resource).  ``null``
    is accepted nowhere (an absent key takes the default)."""

    version: int
    fatal: bool = False
    dropped: _Count = 0
    total: _Count | msgspec.UnsetType = msgspec.UNSET
    tensormap_max: _Count | msgspec.UnsetType = msgspec.UNSET


_RawMeta = cast(type[_RawMetaFixed], msgspec.defstruct(
    "_RawMeta", [(r.max_field, list[_Count], msgspec.field(default_factory=list)) for r in TABLE],
    bases=(_RawMetaFixed,), module=__name__))
"""The metadata line: :class:`_RawMetaFixed` and ``*_max``, a list per resource of :data:`TABLE`."""


class _RawFixed(msgspec.Struct, gc=False):
    """A record's keys besides the resources' counters (:data:`_RawRecord` adds them)."""

    site: str
    phase: Literal["begin", "end", "task"]
    depth: int
    ring: int
    tensormap: _Counter


_RawRecord = cast(type[_RawFixed], msgspec.defstruct(
    "_RawRecord",
    [*((f, _Counter) for r in _ALWAYS for f in (r.start_field, r.end_field)),
     *((f, _Counter | None, None) for r in TABLE if r not in _ALWAYS for f in (r.start_field, r.end_field))],
    bases=(_RawFixed,), module=__name__, gc=False))
"""A record: :class:`_RawFixed` and ``*_start``/``*_end`` per resource of :data:`TABLE`, required for those every
version carries, else None when absent (whether a version requires them is its rule's)."""

_META_DECODER = msgspec.json.Decoder(_RawMeta)
_RECORD_DECODER = msgspec.json.Decoder(_RawRecord)


_SITE_OPEN = b'{"site": "'
_SITE_CLOSE = b'", "phase": "'
_LINE_BREAK = b"}\n" + _SITE_OPEN  # between two record lines as the runtime writes them


def _repair_site(raw: bytes) -> bytes | None:
    """The runtime writes ``site`` raw: no JSON escaping, basename cut to 31 bytes (maybe inside a
    UTF-8 character).  Re-encode the bytes between ``{"site": "`` and ``", "phase": "``; None when
    the line does not have that shape."""
    if not raw.startswith(_SITE_OPEN):
        return None
    end = raw.find(_SITE_CLOSE, len(_SITE_OPEN))
    if end < 0:
        return None
    site = raw[len(_SITE_OPEN):end].decode("utf-8", "replace")
    return b'{"site": ' + msgspec.json.encode(site) + raw[end + 1:]


def _describe(err: Exception, raw: bytes = b"") -> str:
    text = str(err)
    if text.startswith("Number out of range"):
        return f"number out of range, not a finite integer ({text})"
    if isinstance(err, msgspec.DecodeError) and not isinstance(err, msgspec.ValidationError):
        hint = "; NaN and Infinity are not JSON numbers" if b"NaN" in raw or b"Infinity" in raw else ""
        return f"invalid JSON ({text}{hint})"
    return text


_TOO_DEEP = "JSON nested too deeply to be a metadata line or a record"


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


class Decoder:
    """Incremental decoder for one run of one file.

    Called from one task or thread only.  ``feed`` and ``finish`` never raise for bad input:
    every problem comes back as a :class:`Problem` item, in line order with the rest.
    """

    def __init__(self, max_line: int = MAX_LINE, scanner: LineScanner | None = None) -> None:
        """``scanner``: a faster reader offered the lines first (the compiled core's: see :class:`LineScanner`)."""
        self.scanner = scanner
        self._configured: tuple[Meta | None, Version] | None = None  # what the scanner was told
        self._fast = False  # the scanner takes lines of this file
        self._max_line = max_line
        self._partial = b""
        self._skipping = False  # inside an over-long line: drop bytes up to the next newline
        self.line = 0  # lines seen so far (1-based number of the last complete line)
        self.meta: Meta | None = None
        self.records = 0
        self.parse_errors = 0
        self._version = SUPPORTED_VERSIONS.stop - 1
        self._rule = version_rule(self._version)
        self._dead = False  # unsupported version: ignore the rest
        self._crlf_warned = False
        self._held: tuple[Problem, str] | None = None  # a bad first line, until line 2 says what the file is
        self._task_warned = False
        self._site_warned = False
        self._last: dict[int, Record] = {}  # latest sample per ring (heap unrolled), good or backwards
        self._raw_heap: dict[int, int] = {}  # v4/v5: last raw (wrapped) heap head per ring
        if scanner is None:  # it checks every record itself
            _install_checks()

    @property
    def pending(self) -> int:
        """Bytes held back as an unfinished last line."""
        return len(self._partial)

    def feed(self, chunk: bytes) -> list[Item]:
        """Decode every complete line in ``chunk`` (plus what was held back)."""
        out: list[Item] = []
        if not chunk:
            return out
        start = 0
        if self._skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                return out
            self._skipping = False
            start = nl + 1
        first = chunk.find(b"\n", start)
        if first < 0:
            tail = self._partial + chunk[start:] if self._partial else chunk[start:]
        else:
            # the first line completes what was held back; the lines after it are whole in ``chunk``
            self._line(self._partial + chunk[start:first] if self._partial else chunk[start:first], out)
            cut = chunk.rfind(b"\n") + 1
            if cut > first + 1:
                self._lines(chunk, first + 1, cut, out)
            tail = chunk[cut:]
        if len(tail) > self._max_line:
            self.line += 1
            self._too_long(out)
            self._partial = b""
            self._skipping = True
        else:
            self._partial = tail
        return out

    def finish(self, cut: bool = False) -> list[Item]:
        """The file is done: decode a last line that has no newline, and check for emptiness.

        ``cut``: the file was rewritten or deleted under the reader, so a last line without its
        newline was cut by that, not written wrong: it is dropped, not reported.
        """
        out: list[Item] = []
        if cut:
            self._partial = b""
        if self._partial:
            piece, self._partial = self._partial, b""
            self._line(piece, out)
        self._skipping = False
        if self._held is not None:
            self._not_scope_stats(out)
        if self.line == 0:
            self._error(out, 0, "empty_file", "empty file: no metadata line and no records")
        elif self.meta is not None and self.records == 0 and self.parse_errors == 0:
            out.append(Problem(0, "metadata_only", "metadata line only: no scope records", "warning"))
        return out

    # -- one line ---------------------------------------------------------------------------

    def _error(self, out: list[Item], line: int, reason: str, message: str) -> None:
        self.parse_errors += 1
        out.append(Problem(line, reason, message))

    def _hold(self, problem: Problem, why: str) -> None:
        """A first line that is no metadata line: reported once line 2 tells whether the file is one at all."""
        self._held = (problem, why)

    def _release(self, out: list[Item], at: int | None = None) -> None:
        """Line 2 is a record: the first line was a bad metadata line of a real file.  Its problem goes
        into ``out`` at ``at`` (default: the end), so items stay in line order."""
        if self._held is not None:
            problem, _ = self._held
            self._held = None
            self.parse_errors += 1
            out.insert(len(out) if at is None else at, problem)

    def _not_scope_stats(self, out: list[Item]) -> None:
        """Neither line 1 nor line 2 is what a scope_stats file holds: one error, the rest is not read."""
        assert self._held is not None
        _, why = self._held
        self._held = None
        self._dead = True
        self._error(out, 1, "not_scope_stats", f"not a scope_stats file: {why}")

    def _too_long(self, out: list[Item]) -> None:
        self._error(out, self.line, "line_too_long", f"line longer than {self._max_line} bytes, skipped")

    def _lines(self, buf: bytes, start: int, end: int, out: list[Item]) -> None:
        """The whole lines in ``buf[start:end]`` (which ends with a newline), after line 1."""
        scanner = self.scanner
        if scanner is not None and self._held is None:
            self._scan_lines(scanner, buf, start, end, out)
            return
        raws = self._batch(buf, start, end)
        if raws is None:
            for piece in buf[start:end - 1].split(b"\n"):
                self._line(piece, out)
            return
        mark = len(out)
        self._batch_lines(raws, out)
        if scanner is not None:  # after a held first line: read here in one batch, given to the scanner now
            scanner.load(self._last, self._raw_heap)
            scanner.decoded(out, mark)

    def _batch_lines(self, raws: list[_RawFixed], out: list[Item]) -> None:
        """The records of one :meth:`_batch`, checked in order."""
        self._release(out)
        first = self.line + 1
        self.line += len(raws)
        if self._rule.wraps or not all(self._rule.carried):
            checked = self._checked
            for line, r in enumerate(raws, first):
                checked(r, line, out)
        else:
            self._checked_v6(raws, first, out)

    def _batch(self, buf: bytes, start: int, end: int) -> list[_RawFixed] | None:
        """The lines of ``buf[start:end]`` decoded by one ``decode_lines`` call, one record per line;
        None unless that provably reads the same records as :meth:`_line` one line at a time.

        It does when every line starts with ``{"site": "`` (the runtime's first key) and ends with
        ``}`` (so no blank line, no CR, no value spanning lines: ``}`` newline ``{`` cannot be
        inside one JSON value), no line is over ``max_line``, and there are as many values as lines
        (so none holds two).
        """
        if self._dead or not buf.startswith(_SITE_OPEN, start) or not buf.endswith(b"}\n", start, end):
            return None
        n = buf.count(b"\n", start, end)
        if buf.count(_LINE_BREAK, start, end) != n - 1 or (end - start > self._max_line
                                                          and not self._fits(buf, start, end)):
            return None
        try:
            raws = _RECORD_DECODER.decode_lines(memoryview(buf)[start:end])
        except (msgspec.DecodeError, RecursionError):
            return None
        return raws if len(raws) == n else None

    def _fits(self, buf: bytes, start: int, end: int) -> bool:
        """No line of ``buf[start:end]`` (ending with a newline) is longer than ``max_line``."""
        window = self._max_line + 1
        while end - start > window:
            nl = buf.rfind(b"\n", start, start + window)
            if nl < 0:
                return False
            start = nl + 1
        return True

    def _scan_ready(self, scanner: LineScanner) -> bool:
        """The scanner may take the next line: past line 1, no first line held, a file still read; told
        the metadata (and its rule) when they changed."""
        if self.line < 1 or self._held is not None or self._dead:
            return False
        meta, rule = self.meta, self._rule
        if self._configured is None or self._configured[0] is not meta or self._configured[1] != rule:
            wrapped = meta.maxes(_WRAPPED.name) if meta is not None else ()
            self._fast = scanner.configure(rule, rings_of(meta), wrapped, self._max_line)
            self._configured = (meta, rule)
            scanner.load(self._last, self._raw_heap)
        return self._fast

    def _scan_lines(self, scanner: LineScanner, buf: bytes, start: int, end: int, out: list[Item]) -> None:
        """:meth:`_lines` with a scanner: runs of lines it takes, and each line it does not, read here."""
        pos = start
        while pos < end:
            if self._scan_ready(scanner):
                pos, lines, records = scanner.scan(buf, pos, end, self.line + 1, out)
                self.line += lines
                self.records += records
                if pos >= end:
                    return
            nl = buf.index(b"\n", pos, end)
            self._read_for(scanner, buf[pos:nl], out)
            pos = nl + 1

    def _read_for(self, scanner: LineScanner, raw: bytes, out: list[Item]) -> None:
        """One line the scanner did not take, read here on its per-ring state; what it made goes to it."""
        scanner.export(self._last, self._raw_heap)
        mark = len(out)
        self._read(raw, out)
        scanner.load(self._last, self._raw_heap)
        scanner.decoded(out, mark)

    def _line(self, raw: bytes, out: list[Item]) -> None:
        scanner = self.scanner
        if scanner is None:
            self._read(raw, out)
            return
        if self._scan_ready(scanner):
            _, lines, records = scanner.scan(raw, 0, len(raw), self.line + 1, out)
            if lines:
                self.line += 1
                self.records += records
                return
        self._read_for(scanner, raw, out)

    def _read(self, raw: bytes, out: list[Item]) -> None:
        """One line, read here."""
        self.line += 1
        if raw.endswith(b"\r"):
            raw = raw[:-1]
            if not self._crlf_warned:
                self._crlf_warned = True
                out.append(Problem(self.line, "crlf", "CRLF line endings, read as LF", "warning"))
        if self._dead:
            return
        if self._held is not None and self.line >= 2:
            mark, errors, records = len(out), self.parse_errors, self.records
            self._line_body(raw, out)
            if self.records > records:
                self._release(out, mark)  # before line 2's items, as the batch path puts it: in line order
            else:  # line 2 is no record either: not this tool's file; its own complaint is dropped
                del out[mark:]
                self.parse_errors = errors
                self._not_scope_stats(out)
            return
        self._line_body(raw, out)

    def _line_body(self, raw: bytes, out: list[Item]) -> None:
        if not raw.strip():
            self._error(out, self.line, "blank_line", "blank line")
            return
        if len(raw) > self._max_line:
            self._too_long(out)
            return
        if self.line == 1:
            if raw.startswith(BOM):
                raw = raw[len(BOM):]
                out.append(Problem(1, "bom", "UTF-8 byte order mark before the metadata line, ignored", "warning"))
            self._first_line(raw, out)
            return
        self._record(raw, out)

    def _first_line(self, raw: bytes, out: list[Item]) -> None:
        try:
            obj: Any = msgspec.json.decode(raw)
        except RecursionError:
            self._hold(Problem(1, "nested_too_deep", f"first line: {_TOO_DEEP}"), "its first line is not JSON")
            return
        except msgspec.DecodeError as err:
            binary = b"\x00" in raw or not _is_utf8(raw)
            self._hold(Problem(1, "invalid_json", f"metadata line: {_describe(err, raw)}"),
                       "its first line is binary data, not JSON" if binary else "its first line is not JSON")
            return
        if not isinstance(obj, dict) or "version" not in obj:
            problem = Problem(1, "no_metadata", "first line is not the metadata line (no \"version\")")
            if isinstance(obj, dict) and "phase" in obj:  # a record: a file that lost its metadata line
                self._error(out, 1, problem.reason, problem.message)
                self._record(raw, out)
                return
            self._hold(problem, "its first line has no \"version\"" if isinstance(obj, dict)
                       else "its first line is not a JSON object")
            return
        if not isinstance(obj["version"], int) or isinstance(obj["version"], bool):
            self._hold(Problem(1, "bad_metadata", "metadata line unreadable (\"version\" is not an integer): "
                               "version, fatal, dropped, total and capacities unknown"),
                       "its first line's \"version\" is not an integer")
            return
        try:
            m = _META_DECODER.decode(raw)
        except (msgspec.DecodeError, RecursionError) as err:
            why = _TOO_DEEP if isinstance(err, RecursionError) else _describe(err, raw)
            self._error(out, 1, "bad_metadata",
                        f"metadata line unreadable ({why}): version, fatal, dropped, total and capacities unknown")
            return
        if m.total is not msgspec.UNSET and m.dropped > m.total:
            self._error(out, 1, "bad_metadata",
                        f"metadata line unreadable (dropped {m.dropped} is more than total {m.total}, which counts "
                        "the dropped records too): version, fatal, dropped, total and capacities unknown")
            return
        if m.version not in SUPPORTED_VERSIONS:
            if m.version < SUPPORTED_VERSIONS.start:
                self._dead = True
                self._error(out, 1, "unsupported_version",
                            f"schema version {m.version} is not supported (versions {SUPPORTED_VERSIONS.start}-"
                            f"{SUPPORTED_VERSIONS.stop - 1} are)")
                return
            out.append(Problem(1, "newer_version",
                               f"schema version {m.version} is newer than {SUPPORTED_VERSIONS.stop - 1}; read as "
                               f"version {SUPPORTED_VERSIONS.stop - 1}", "warning"))
        self._version = m.version
        self._rule = version_rule(m.version)
        if not all(getattr(m, r.max_field) for r in _ALWAYS):
            out.append(Problem(1, "no_capacities", "metadata has no ring capacities; ratios unavailable",
                               "warning"))
        self.meta = Meta(
            version=m.version, fatal=m.fatal, dropped=m.dropped,
            total=None if m.total is msgspec.UNSET else m.total,
            tensormap_max=None if m.tensormap_max is msgspec.UNSET else m.tensormap_max,
            **{r.max_field: tuple(getattr(m, r.max_field)) for r in TABLE},
        )
        out.append(self.meta)

    def _record(self, raw: bytes, out: list[Item]) -> None:
        line = self.line
        try:
            r = _RECORD_DECODER.decode(raw)
        except RecursionError:
            self._error(out, line, "nested_too_deep", _TOO_DEEP)
            return
        except msgspec.DecodeError as err:
            fixed = None if isinstance(err, msgspec.ValidationError) else _repair_site(raw)
            if fixed is not None:
                try:
                    r = _RECORD_DECODER.decode(fixed)
                except (msgspec.DecodeError, RecursionError):
                    pass
                else:
                    if not self._site_warned:
                        self._site_warned = True
                        out.append(Problem(line, "unescaped_site",
                                           "site is not valid JSON (a \" or a cut UTF-8 character in the file "
                                           "name, written unescaped by the runtime); repaired, and so are later "
                                           "such lines", "warning"))
                    self._checked(r, line, out)
                    return
            if b'"version"' in raw and b'"site"' not in raw:
                self._error(out, line, "metadata_again",
                            "a second metadata line: two runs concatenated in one file?")
            else:
                self._error(out, line, "invalid_record", _describe(err, raw))
            return
        self._checked(r, line, out)

    # the record checks, written out over TABLE once (:func:`_check_source`, :func:`_install_checks`):

    def _checked(self, r: _RawFixed, line: int, out: list[Item]) -> None:
        """Validate a decoded record against the metadata and the ring's previous sample."""
        _install_checks()
        self._checked(r, line, out)

    def _checked_v6(self, raws: list[_RawFixed], line: int, out: list[Item]) -> None:
        """:meth:`_checked` for records ``line``, ``line + 1``, ... of a version >= 6 file (heap counters that do
        not wrap, every resource required).  A record that passes every check against its ring's previous sample is
        built there in one go; any other goes through :meth:`_checked` (the ring's first sample, a task record,
        anything out of range, missing or backwards), which makes the same checks in order and says what is
        wrong."""
        _install_checks()
        self._checked_v6(raws, line, out)

    def _missing(self, out: list[Item], line: int, i: int) -> None:
        r = TABLE[i]
        self._error(out, line, "invalid_record",
                    f"missing {r.start_field}/{r.end_field} (required in version {self._version})")

    def _backwards(self, out: list[Item], line: int, rec: Record, last: Record, wraps: bool) -> None:
        """``rec`` went backwards from ``last`` (its ring's previous sample): the first counter that did, in the
        records' order.  v4/v5 heap counters are derived by unrolling: the head cannot go backwards, and the tail
        may (a full ring reads as empty, so the next sample's tail is lower): not checked."""
        for r in TABLE:
            if wraps and r.contiguous:
                continue
            for name in (r.start_field, r.end_field):
                now, prev = getattr(rec, name) or 0, getattr(last, name) or 0
                if now < prev:
                    self._error(out, line, "counter_backwards",
                                f"{name} went backwards on ring {rec.ring}: {now} after {prev}")
                    return

    def _unroll(self, ring: int, raw_tail: int, raw_head: int, last_head: int | None) -> tuple[int, int]:
        """v4/v5: map wrapped heap offsets onto monotonic counters for ``ring`` (``last_head``: its previous
        record's, unrolled; None before its first)."""
        meta = self.meta
        cap = meta.capacity(_WRAPPED.name, ring) if meta is not None else None
        if cap is None:
            return raw_tail, raw_head
        last_raw = self._raw_heap.get(ring)
        if last_raw is None or last_head is None:  # first sample of the ring: the lap that keeps the tail >= 0
            head = raw_head + cap if raw_head < raw_tail else raw_head
        else:
            head = last_head + (raw_head - last_raw) % cap
        return head - (raw_head - raw_tail) % cap, head


def _check_source() -> str:
    """The source of :meth:`Decoder._checked` and :meth:`Decoder._checked_v6`: the checks of each resource of
    :data:`TABLE` written out (``s{i}``/``e{i}``: its tail and head), and the :class:`Record` built positionally
    (its fields named in its order; a field this cannot fill fails the import)."""
    n = range(len(TABLE))
    optional = [i for i in n if TABLE[i] not in _ALWAYS]
    wrapped = TABLE.index(_WRAPPED)

    def record(line: str, depth: str, tensormap: str) -> str:
        given = {"line": line, "site": "r.site", "phase": "r.phase", "depth": depth, "ring": "ring",
                 "tensormap": tensormap}
        for i in n:
            given[TABLE[i].start_field], given[TABLE[i].end_field] = f"s{i}", f"e{i}"
        return f"Record({', '.join(given[f] for f in Record.__struct_fields__)})"

    def backwards(last: str, i: int, none: bool = False) -> str:
        r = TABLE[i]
        if none:
            return (f"(s{i} or 0) < ({last}.{r.start_field} or 0) or (e{i} or 0) < ({last}.{r.end_field} or 0)")
        return f"s{i} < {last}.{r.start_field} or e{i} < {last}.{r.end_field}"

    loads = "".join(f"    s{i} = r.{TABLE[i].start_field}\n    e{i} = r.{TABLE[i].end_field}\n" for i in n)
    required = "".join(f"""    if carried[{i}]:
        if s{i} is None or e{i} is None:
            self._missing(out, line, {i})
            return
    else:
        s{i} = e{i} = None
""" for i in optional)
    negative = " or ".join([*(f"(s{i} is not None and s{i} < 0) or (e{i} is not None and e{i} < 0)"
                              if i in optional else f"s{i} < 0 or e{i} < 0" for i in n), "r.tensormap < 0"])
    moved = " or ".join([*(backwards("last", i, i in optional) for i in n if i != wrapped),
                         f"(not wraps and ({backwards('last', wrapped)}))"])
    v6_loads = "".join(f"        s{i} = r.{TABLE[i].start_field}\n        e{i} = r.{TABLE[i].end_field}\n" for i in n)
    v6_bad = " or ".join(["not 0 <= depth <= MAX_DEPTH", "tm < 0", *(f"s{i} is None or e{i} is None" for i in optional),
                          'r.phase == "task"', *(backwards("last", i) for i in n)])
    return f"""
def _checked(self, r, line, out):
    if r.phase == "task":
        if not self._task_warned:
            self._task_warned = True
            out.append(Problem(line, "task_records", '"phase": "task" records are ignored', "warning"))
        return
    if not 0 <= r.depth <= MAX_DEPTH:
        self._error(out, line, "depth_out_of_range", f"depth {{r.depth}} outside 0..{{MAX_DEPTH}}")
        return
    meta = self.meta
    rings = len(meta.{TABLE[0].max_field}) if meta is not None and meta.{TABLE[0].max_field} else DEFAULT_RINGS
    ring = r.ring
    if not 0 <= ring < rings:
        self._error(out, line, "ring_out_of_range", f"ring {{ring}} outside the metadata's rings 0..{{rings - 1}}")
        return
    rule = self._rule
    carried = rule.carried
{loads}{required}    if {negative}:
        self._error(out, line, "negative_counter", "a counter is negative")
        return
    wraps = rule.wraps
    last = self._last.get(ring)
    if wraps:
        s{wrapped}, e{wrapped} = self._unroll(ring, s{wrapped}, e{wrapped},
                                              None if last is None else last.{_WRAPPED.end_field})
    rec = {record("line", "r.depth", "r.tensormap")}
    self._last[ring] = rec
    self._raw_heap[ring] = r.{_WRAPPED.end_field}
    if last is not None and ({moved}):
        # The record is dropped, but it stays the ring's reference (set above): after one
        # corrupt spike the following good records must not all read as going backwards.
        self._backwards(out, line, rec, last, wraps)
        return
    self.records += 1
    out.append(rec)


def _checked_v6(self, raws, line, out):
    last_of = self._last
    append = out.append
    checked = self._checked
    slow = 0
    for n, r in enumerate(raws, line):
        ring = r.ring
        try:
            last = last_of[ring]
        except KeyError:  # the ring's first sample, or a ring out of range
            checked(r, n, out)
            slow += 1
            continue
        depth = r.depth
        tm = r.tensormap
{v6_loads}        # a ring with a previous sample is in range, and that sample's counters are >= 0:
        # counters that did not go backwards are not negative either
        if {v6_bad}:
            checked(r, n, out)
            slow += 1
        else:
            last_of[ring] = rec = {record("n", "depth", "tm")}
            append(rec)
    self.records += len(raws) - slow
"""


@functools.cache
def _install_checks() -> None:
    """:meth:`Decoder._checked` and :meth:`Decoder._checked_v6` become :func:`_check_source`'s, compiled once: when
    the first decoder without a scanner is made, or at the first call (which a compiled read, whose scanner checks
    the records, may never make)."""
    made = unrolled(_check_source(), {"Record": Record, "Problem": Problem, "MAX_DEPTH": MAX_DEPTH,
                                      "DEFAULT_RINGS": DEFAULT_RINGS})
    Decoder._checked, Decoder._checked_v6 = made["_checked"], made["_checked_v6"]  # type: ignore[method-assign]
