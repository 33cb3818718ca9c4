"""The Perfetto sinks: scope timelines as native protobuf TrackEvent traces (or Chrome JSON).

:class:`PerfettoSink` writes every source it receives into one trace (``convert``);
:class:`PerfettoDirSink` writes one trace per finished run into a directory (``watch``).  Both
stream: packets are appended to ``<file>.tmp`` as events arrive and the file is renamed into
place when it is complete, so a trace file is never seen half-written.  Memory is O(nesting
depth) per open run plus compression batches (at most 3 x 256 KiB in ``convert``, where a
worker thread deflates them; 64 KiB per open run in the dir sink), never the trace.

Layout of a trace:

* one process per source, named :attr:`Source.name` (run/rank/dispatch).  pids follow the
  rank order (``convert``: all sources sorted by run, rank, dispatch; dir sink: rank + 1, mapped
  into Perfetto's int32 range for huge ranks: :func:`~ringtrace.sinks.perfetto._layout.rank_pid`).
  The process descriptor is written when the run ends, so its description and labels can
  state the version, ``fatal``, ``dropped``, an incomplete file and a wedge;
* under it, one track per ring (``ring N``) holding the scopes as nested slices: name = site;
  args (on the end event, which the trace processor merges into the slice): ``depth``,
  ``line`` (the begin's line) and ``<resource>_high_water|_live_at_exit|_alloc`` for paired
  scopes; ``unmatched_begin`` for a begin that never ended (closed at the record that
  abandoned it); ``wedged`` for a scope still open at the end of the run (closed at the
  final tick, plus an instant ``WEDGED`` inside the innermost one);
* counter tracks ``ring N <resource> (cap ...)``: the live occupancy (head - tail) of the
  ring at each of its boundary records (heap in bytes, ``UNIT_SIZE_BYTES``), and
  ``tensormap (cap ...)``.  Counter values ride on the slice events as
  ``extra_counter_values`` (at most 4 per event; Perfetto's limit is 8).

Time axis: records have no timestamps; 1 ns of trace time is one boundary record and an
event's timestamp is the record's line number in the file (set Perfetto's timestamp format to
"Raw" to read line numbers).  Every slice boundary is its own record, so nested slices never
share a timestamp.  The ``chrome-json`` format uses 1 us per record (JSON's unit) and keeps
the same layout; it is meant for small traces.

Encoding: one packet sequence per (source, ring) whose first packet clears the incremental
state, interns the annotation names and sets ``TrackEventDefaults`` (the ring's slice track
and its counter tracks); site names are interned per sequence.  Packets are written inside
``compressed_packets`` (zlib), Perfetto's own packet compression.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from ringtrace.files import newest, path_hash
from ringtrace.model.records import Labels, RunFinished, SinkEvent, Source
from ringtrace.sinks.base import Sink

from ._file import TraceFile
from ._json import JsonTrace
from ._trace_writer import ProtoTrace

log = logging.getLogger("ringtrace.sinks.perfetto")

Format = Literal["proto", "chrome-json"]


class _Output:
    """A trace file and its encoder (protobuf or JSON), written atomically (temp file + rename).

    ``keep_open=False`` (the dir sink) holds no file descriptor between writes: batches are
    appended to the temp file.
    """

    def __init__(self, path: Path, fmt: Format, defer_processes: bool, batch: int = 256 << 10,
                 keep_open: bool = True, threaded: bool = False) -> None:
        self.path = path
        self.tf = TraceFile(path, compress=fmt == "proto", batch=batch, keep_open=keep_open, threaded=threaded)
        self.enc = ProtoTrace(self.tf, defer_processes) if fmt == "proto" else JsonTrace(self.tf, defer_processes)

    def receive(self, event: SinkEvent) -> None:
        self.enc.receive(event)

    def flush(self) -> None:
        self.tf.flush()

    def commit(self) -> None:
        self.enc.close()
        self.tf.commit()

    def abort(self) -> None:
        self.tf.abort()


class PerfettoSink(Sink):
    """Every source it receives, in one trace at ``path`` (``convert``).

    Streams into ``path.with_suffix(path.suffix + ".tmp")`` and renames it to ``path`` in
    :meth:`close`.  The temp file is created by the constructor (OSError if it cannot be);
    a later error (writing, or encoding) is logged, stops the sink and is raised again from
    :meth:`close` (the fan-out counts it); the temp file is then removed and ``path`` left untouched.
    """

    name = "perfetto"

    def __init__(self, path: Path, fmt: Format = "proto") -> None:
        self.path = Path(path)
        self._out: _Output | None = _Output(self.path, fmt, defer_processes=True, threaded=True)
        self.error: OSError | None = None

    def _fail(self, err: Exception) -> None:
        """Any error stops the sink and discards the trace (never a partial trace at ``path``)."""
        log.error("perfetto: cannot write %s: %s", self.path, err)
        self.error = err if isinstance(err, OSError) else OSError(f"{type(err).__name__}: {err}")
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.abort()
            self._out = None

    def receive(self, event: SinkEvent) -> None:
        if self._out is None:
            return
        try:
            self._out.receive(event)
        except Exception as err:
            self._fail(err)

    def flush(self, deadline: float) -> None:
        if self._out is None:
            return
        try:
            self._out.flush()
        except Exception as err:
            self._fail(err)

    def close(self) -> None:
        if self._out is not None:
            try:
                self._out.commit()
            except Exception as err:
                self._fail(err)
            self._out = None
        if self.error is not None:
            raise self.error


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_TEMP_NAME = re.compile(r"[A-Za-z0-9._-]+-[0-9a-f]{8}\.(pftrace|json)\.tmp")


def source_hash(source: Source) -> str:
    """8 hex digits of the source's path: tells apart runs with the same labels from different roots."""
    return path_hash(source.path)


def trace_file_name(source: Source, fmt: Format = "proto") -> str:
    """``<run>[-rank<N>][-d<K>][-g<generation>]-<path hash>.pftrace`` (``.json`` for chrome-json).

    Without a run label the name is made from the file's path (its directories joined by ``_``).
    The hash (:func:`source_hash`) makes the name, and its ``.tmp``, unique per source file: two
    runs labelled alike under different roots never share a file.
    """
    name = trace_stem(source.labels, source.path)
    if source.generation:
        name += f"-g{source.generation}"
    return name[-_KEPT:] + "-" + source_hash(source) + (".pftrace" if fmt == "proto" else ".json")


_KEPT = 190  # the end of a long name is kept: the run's labels
_TRACE_NAME = re.compile(r"(.+)-[0-9a-f]{8}\.(?:pftrace|json)")
_GENERATION = re.compile(r"-g[1-9][0-9]*\Z")


def trace_stem(labels: Labels, path: str) -> str:
    """The part of :func:`trace_file_name` the labels make (the path's, without a run label):
    ``<run>[-rank<N>][-d<K>]``."""
    base = labels.run or str(Path(path).with_suffix("")).strip("/")
    name = _UNSAFE.sub("_", base).strip("._") or "trace"
    if labels.rank:
        name += f"-rank{labels.rank}"
    if labels.dispatch:
        name += f"-d{labels.dispatch}"
    return _UNSAFE.sub("_", name)


def find_trace(directory: Path, labels: Labels) -> Path | None:
    """The trace :class:`PerfettoDirSink` wrote in ``directory`` for the run ``labels`` name (of several,
    generations or source paths, the newest); None when there is none (or ``labels`` has no run)."""
    if not labels.run:
        return None
    stem = trace_stem(labels, "")

    def wanted(file_name: str) -> bool:
        m = _TRACE_NAME.fullmatch(file_name)
        if m is None:
            return False
        if m[1] == stem[-_KEPT:]:
            return True
        gen = _GENERATION.search(m[1])
        return gen is not None and (stem + gen[0])[-_KEPT:] == m[1]

    return newest(directory, wanted)


class PerfettoDirSink(Sink):
    """One trace per finished run in ``directory`` (``watch --perfetto-dir``).

    Each run streams into its own temp file (``<name>.tmp``, opened only while a batch is
    appended), renamed to :func:`trace_file_name` when its :class:`RunFinished` arrives.
    Memory O(depth) + one 64 KiB batch per open run, in either format.

    A write error (a full disk, a directory gone; any error) discards that run's trace: its temp file is
    removed, the rest of the run's events are ignored (so no truncated trace is ever renamed
    into place), and the error is raised to the caller, the :class:`~ringtrace.sinks.FanOut`,
    which logs and counts it (``ringtrace_sink_errors_total{sink="perfetto-dir"}``).  Runs that
    fail together in :meth:`flush` are raised as one :class:`ExceptionGroup`, counted once per
    run.  ``errors`` counts the discarded runs too.

    Only a finished run gets a file under its final name.  :meth:`close` discards the runs
    still open (their temp files are removed, ``discarded_at_close`` counts them): at a
    shutdown with ``--state-dir`` the restart reads such a run whole and writes its trace then
    (without it the app finishes open runs as ``shutdown`` before closing, so none is open).
    :meth:`dropped` (the fan-out: some of a run's events were dropped while this sink was
    stuck) discards that run's trace the same way, and the rest of the run is ignored.

    The constructor removes temp files of a previous process that was killed mid-run (names of
    :func:`trace_file_name` + ``.tmp``): a run that comes back is written anew, one that does not
    would leave them forever.  So one process writes a directory.
    """

    name = "perfetto-dir"

    def __init__(self, directory: Path, fmt: Format = "proto",
                 on_written: Callable[[Path], None] | None = None) -> None:
        self.directory = Path(directory)
        self.fmt = fmt
        self.on_written = on_written
        self._open: dict[Source, _Output] = {}
        self._failed: set[Source] = set()  # runs whose trace was discarded, until their RunFinished
        self.written: list[Path] = []
        self.errors = 0
        self.discarded_at_close = 0
        self.discarded_dropped = 0  # runs whose trace was given up because events of theirs were dropped
        stale = [p for p in self.directory.glob("*.tmp") if _TEMP_NAME.fullmatch(p.name)]
        for path in stale:
            with contextlib.suppress(OSError):
                path.unlink()
        if stale:
            log.info("perfetto-dir: removed %d temp file(s) a killed process left in %s", len(stale), self.directory)

    def _discard(self, src: Source, out: _Output | None, err: Exception, name: str) -> Exception:
        """Drop ``src``'s trace after ``err``; the error to raise (names the run and the file).

        Any error discards: a trace that failed half-way (a full disk, or a bug) is never committed."""
        self.errors += 1
        self._open.pop(src, None)
        if out is not None:
            with contextlib.suppress(OSError):
                out.abort()
        where = f"cannot write the trace {self.directory / name} of {src.path!r}"
        if isinstance(err, OSError):
            return OSError(err.errno, f"{where}: {err.strerror or err}; the trace is discarded")
        return RuntimeError(f"{where}: {type(err).__name__}: {err}; the trace is discarded")

    def receive(self, event: SinkEvent) -> None:
        src = event.source
        if not src.path:
            return  # a run known from its host log alone: no records to draw
        if src in self._failed:
            if isinstance(event, RunFinished):
                self._failed.discard(src)
            return
        out = self._open.get(src)
        name = trace_file_name(src, self.fmt)
        try:
            if out is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                out = self._open[src] = _Output(self.directory / name, self.fmt, False,
                                                batch=64 << 10, keep_open=False)
            out.receive(event)
            if isinstance(event, RunFinished):
                del self._open[src]
                out.commit()
                self.written.append(out.path)
        except Exception as err:
            if not isinstance(event, RunFinished):
                self._failed.add(src)
            raise self._discard(src, out, err, name) from err
        if isinstance(event, RunFinished) and self.on_written is not None:
            self.on_written(out.path)

    def flush(self, deadline: float) -> None:
        failures: list[Exception] = []
        for src, out in list(self._open.items()):
            try:
                out.flush()
            except Exception as err:
                self._failed.add(src)
                failures.append(self._discard(src, out, err, out.path.name))
        if failures:
            raise ExceptionGroup("perfetto-dir: traces discarded", failures)

    def dropped(self, source: Source) -> None:
        """Events of ``source``'s run never reach this sink: its trace would be incomplete, so none is
        written (the temp file is removed; the run's later events are ignored until its RunFinished)."""
        if not source.path:
            return
        out = self._open.pop(source, None)
        if out is not None:
            with contextlib.suppress(OSError):
                out.abort()
        if source not in self._failed:
            self._failed.add(source)
            self.discarded_dropped += 1
            log.warning("perfetto-dir: events of %s were dropped (the sink was stuck): its trace is not written",
                        source.path)

    def close(self) -> None:
        """Discard the runs still open: no file under a final name for a run that did not finish."""
        open_runs = list(self._open.values())
        self._open.clear()
        self._failed.clear()
        for out in open_runs:
            with contextlib.suppress(OSError):
                out.abort()
        if open_runs:
            self.discarded_at_close += len(open_runs)
            log.info("perfetto-dir: %d run(s) still open at close: no trace written for them (a restart with "
                     "--state-dir reads them whole)", len(open_runs))
