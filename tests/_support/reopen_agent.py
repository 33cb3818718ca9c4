"""A watch process with a test double for a sink that reopens its file (SIGHUP tests).

``python tests/_support/reopen_agent.py ROOT LINES PORT``: the real service (:func:`ringtrace.reading.service.assemble`,
``App.run`` with its signal handlers, the metrics server on 127.0.0.1:PORT) plus
:class:`LinesSink`, which appends one JSON line per finished run to LINES and, like logrotate's
postrotate convention asks, opens LINES again on ``reopen()``.  Exits with the service's code.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

from ringtrace import config
from ringtrace.model.records import RunFinished, SinkEvent
from ringtrace.reading.service import assemble
from ringtrace.sinks import Sink


class LinesSink(Sink):
    name = "lines"

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def receive(self, event: SinkEvent) -> None:
        if isinstance(event, RunFinished):
            os.write(self.fd, json.dumps({"run": event.source.labels.run, "reason": event.reason}).encode() + b"\n")

    def reopen(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.close(self.fd)
        self.fd = fd

    def flush(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        os.close(self.fd)


def main() -> int:
    root, lines, port = sys.argv[1:4]
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(levelname)s: %(message)s")
    cfg = config.build({"metrics_addr": f"127.0.0.1:{port}", "idle_timeout": 600, "rescan_interval": 0.5}, env={})
    service = assemble(cfg, [root], extra=[LinesSink(lines)])
    return asyncio.run(service.run())


if __name__ == "__main__":
    sys.exit(main())
