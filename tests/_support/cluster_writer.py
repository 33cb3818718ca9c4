"""One node's ranks, written live by a real process as the runtime writes them (the cluster harness's writer).

Started with a plan (a JSON file, argv[1]): ``{"pace": seconds, "files": [...]}``; each file is
``{"dst": path, "src": staged bytes, "cuts": [byte offsets], "start": round, "hold": piece or null,
"host_log": {"src": ..., "dst": ...} or null}``.  Round ``r`` writes the next piece of every file that started
(pieces are the staged bytes cut at ``cuts``: the first ``open(O_TRUNC)`` then one ``write`` a piece; the host
log, when there is one, is written whole just before the file's first piece, as the runtime writes its log
before it exports the stats of a failed run).  A file whose next piece is ``hold`` stops there (a rank stalled)
until ``resume DST`` arrives on stdin.  Rounds are ``pace`` seconds apart: the runtime's pace, not a
synchronisation; the test waits on what this process reports.

Reports on stdout, one JSON line each, flushed: ``{"event": "written"|"held"|"done", "dst": ..., "t": wall
time after the write}``; ``{"event": "idle"}`` once nothing is left but held files.  Exits at stdin's end.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


class _File:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.dst = Path(spec["dst"])
        data = Path(spec["src"]).read_bytes()
        cuts = [0, *spec["cuts"], len(data)]
        self.pieces = [data[a:b] for a, b in itertools.pairwise(cuts) if b > a]
        self.start = int(spec["start"])
        self.hold: int | None = spec["hold"]
        self.host_log = spec.get("host_log")
        self.next = 0
        self.fd: int | None = None

    def write_next(self) -> None:
        if self.fd is None:
            self.dst.parent.mkdir(parents=True, exist_ok=True)
            if self.host_log:
                Path(self.host_log["dst"]).write_bytes(Path(self.host_log["src"]).read_bytes())
            self.fd = os.open(self.dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        view = memoryview(self.pieces[self.next])
        while view:
            view = view[os.write(self.fd, view):]
        self.next += 1
        if self.next == len(self.pieces):
            os.close(self.fd)
            self.fd = None


def report(event: str, dst: Path | None = None) -> None:
    line = {"event": event, "t": time.time()}
    if dst is not None:
        line["dst"] = str(dst)
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


def main() -> int:
    plan = json.loads(Path(sys.argv[1]).read_text())
    files = [_File(spec) for spec in plan["files"]]
    resumed: set[str] = set()
    lock = threading.Lock()
    wake = threading.Event()
    stop = threading.Event()

    def listen() -> None:
        for line in sys.stdin:
            cmd, _, arg = line.strip().partition(" ")
            if cmd == "resume":
                with lock:
                    resumed.add(arg)
                wake.set()
        stop.set()
        wake.set()

    threading.Thread(target=listen, daemon=True).start()
    held: set[Path] = set()
    rnd = 0
    while not stop.is_set():
        for f in files:
            if rnd < f.start or f.next == len(f.pieces):
                continue
            if f.next == f.hold:
                with lock:
                    go = str(f.dst) in resumed
                if not go:
                    if f.dst not in held:
                        held.add(f.dst)
                        report("held", f.dst)
                    continue
                f.hold = None
            f.write_next()
            report("done" if f.next == len(f.pieces) else "written", f.dst)
        rnd += 1
        with lock:
            active = [f for f in files if f.next < len(f.pieces) and (f.next != f.hold or str(f.dst) in resumed)]
        if active:
            wake.wait(plan["pace"])  # the runtime's pace between rounds (a resume cuts it short)
        else:
            report("idle")
            wake.wait()  # nothing left but held files: until a resume or stdin's end
        wake.clear()
    return 0


if __name__ == "__main__":
    sys.exit(main())
