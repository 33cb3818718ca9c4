"""An agent restart neither pages a failed run again nor resolves its page (the cluster harness, 2 nodes, runs of 8
ranks).

Once the failed run paged, the failed rank's node's agent is killed with SIGKILL (a crash) and started again with
the same ``--state-dir`` and address, then stopped with SIGTERM and started again (a rollout).  After each start
the agent must expose the failed rank's finished series again (its verdict), Prometheus must still hold the run's
alert active since the same moment, and when the series finally go the run has had exactly one page and one
resolution, of the same alert.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests._support.cluster import FAILED, Cluster, Settings, poll, running
from tests._support.require import require
from tests._support.webhook import Notification

DEADLINE = 240.0

pytestmark = pytest.mark.slow


def _paged(c: Cluster, status: str) -> Notification | None:
    assert c.receiver is not None
    return next((n for n in c.receiver.received() if n.run == FAILED and n.status == status), None)


def _alert(c: Cluster) -> dict[str, Any] | None:
    assert c.prometheus is not None
    return next((a for a in c.prometheus.alerts() if a["labels"]["alertname"] == "RingtraceRunVerdictError"
                 and a["labels"]["run"] == FAILED), None)


def test_an_agent_restart_neither_pages_again_nor_resolves(tmp_path: Path) -> None:
    require(shutil.which("prometheus") is not None, "prometheus not installed (Debian package prometheus)")
    require(shutil.which("prometheus-alertmanager") is not None,
            "alertmanager not installed (Debian package prometheus-alertmanager)")
    with running(Settings(nodes=2, ranks=8), tmp_path) as c:
        c.write_runs()
        poll("the failed run's page", lambda: _paged(c, "firing"), DEADLINE, c.logs)
        before = poll("the run's alert in Prometheus", lambda: _alert(c), DEADLINE, c.logs)
        node = c.node_of(c.plan.failed)
        prom = c.prometheus
        assert prom is not None
        verdict = (f'ringtrace_run_verdict{{run="{FAILED}",rank="{c.plan.failed}",instance="{node.addr}",'
                   'severity="error"}')
        for how in (signal.SIGKILL, signal.SIGTERM):  # a crash, then a rollout
            node.agent.stop(how)
            poll("the target seen down", lambda: prom.value(f'up{{instance="{node.addr}"}}') == 0, DEADLINE, c.logs)
            c.start_agent(node)  # the same arguments: --state-dir, address; returns once /readyz says 200
            poll(f"the failed rank's verdict exposed again after {how.name}", lambda: prom.value(verdict) == 1,
                 DEADLINE, c.logs)
            after = poll("the run's alert", lambda: _alert(c), DEADLINE, c.logs)
            assert (after["state"], after["activeAt"]) == ("firing", before["activeAt"]), how.name
        poll("the page resolved once the series went", lambda: _paged(c, "resolved"), DEADLINE, c.logs)
        assert c.receiver is not None
        sent = [n for n in c.receiver.received() if n.run == FAILED]
        assert [n.status for n in sent] == ["firing", "resolved"], [(n.status, n.body["alerts"]) for n in sent]
        assert sent[0].alerts()[0]["startsAt"] == sent[1].alerts("resolved")[0]["startsAt"]
