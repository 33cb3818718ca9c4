"""Finished runs' series across restarts (``watch --state-dir``): the Prometheus sink's journal.

A restarted agent does not read a finished run again (its state says it was delivered), so without this
its verdict series would vanish from ``/metrics`` and Alertmanager would resolve pages of runs still
failed.  The sink appends one JSON line per finished run to ``<state dir>/ringtrace-prometheus.jsonl``:
its key, generation and identity (``RunFinished.key``), its labels, its finish time (wall clock: the TTL
goes on across the restart) and its exposition lines per family.  The line is written by ``receive``
before it returns, so before the app counts the run as delivered and saves the reading state: after a kill
-9 a finished run is in the journal, or it is read and finished again (and then recognised by its key:
its series keep their first finish time).  Only this sink reads the journal; the other sinks never get a
run again from it.

``load`` reads the runs whose TTL has not run out (the last line of a key wins), skips lines that cannot be
read (half a line written at a kill: one warning, counted) and writes the file again with those runs only;
the sink rewrites it too when it holds twice the runs exposed.  A write that fails is logged once per kind
of failure; the series are still served, only the restart loses them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

import msgspec

from ringtrace.files import write_atomic

JOURNAL = "ringtrace-prometheus.jsonl"
log = logging.getLogger("ringtrace.sinks.prometheus")


class Entry(msgspec.Struct, frozen=True):
    """One finished run as the sink exposes it."""

    key: bytes  # the sink's key of the run (its path, raw bytes); a host-log-only run's "\0" + name
    generation: int
    run_key: str  # RunFinished.key: the run's identity across restarts ("" unknown)
    labels: tuple[str, str, str]  # run, rank, dispatch (valid UTF-8)
    finished_at: float  # wall-clock seconds
    record_at: float
    families: dict[str, str]  # family name -> its sample lines (families without any left out)


def encode_key(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


def decode_key(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class Journal:
    """The journal file of one state directory.  Never raises."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / JOURNAL
        self.directory = directory
        self.written = 0  # lines in the file
        self.bad_lines = 0  # lines of the last load that could not be read
        self._failing: str | None = None
        self._fh: int | None = None

    def load(self, now: float, ttl: float) -> list[Entry]:
        """The runs still within their TTL at ``now``, in finish order (the last line of a key wins); the
        file is written again with them alone."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as err:
            log.error("%s: cannot read the finished runs' series (%s): those of the runs finished before the "
                      "restart are not served", self.path, err.strerror or err)
            return []
        decoder = msgspec.json.Decoder(Entry)
        kept: dict[bytes, Entry] = {}
        for line in data.splitlines():
            try:
                e = decoder.decode(line)
            except msgspec.DecodeError:
                self.bad_lines += 1
                continue
            kept.pop(e.key, None)  # a later finish of the same key: in its place in finish order
            kept[e.key] = e
        if self.bad_lines:
            log.warning("%s: %d line(s) could not be read (a write cut short by a kill); the runs on them are "
                        "not served again", self.path, self.bad_lines)
        live = sorted((e for e in kept.values() if e.finished_at + ttl > now), key=lambda e: e.finished_at)
        self.rewrite(live)
        return live

    def append(self, entry: Entry) -> None:
        """Add one finished run (one write: a kill leaves it whole or cut, never mixed with another)."""
        line = msgspec.json.encode(entry) + b"\n"
        try:
            if self._fh is None:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._fh = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.write(self._fh, line)
        except OSError as err:
            self._failed(err)
            return
        self.written += 1
        self._recovered()

    def rewrite(self, entries: Iterable[Entry]) -> None:
        """Replace the file by ``entries`` (atomically)."""
        lines = [msgspec.json.encode(e) + b"\n" for e in entries]
        try:
            write_atomic(self.path, b"".join(lines), mode=0o600)
        except OSError as err:
            self._failed(err)
            return
        self.close()
        self.written = len(lines)
        self._recovered()

    def close(self) -> None:
        if self._fh is not None:
            os.close(self._fh)
            self._fh = None

    def _failed(self, err: OSError) -> None:
        text = f"{type(err).__name__}: {err.strerror or err}"
        if text != self._failing:
            self._failing = text
            log.error("cannot write %s: %s; the finished runs' series are served but a restart loses them",
                      self.path, err.strerror or err)

    def _recovered(self) -> None:
        if self._failing is not None:
            log.warning("%s written again (after: %s)", self.path, self._failing)
            self._failing = None
