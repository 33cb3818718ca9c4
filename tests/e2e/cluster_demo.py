"""``make cluster-demo``: the cluster harness of tests/e2e/test_cluster.py, started for a person to look at.

8 agents, four L3 runs of 128 ranks written live (one failing on one rank, one stalling near capacity), a real
Prometheus with the shipped rules and intervals and a real Alertmanager with the shipped routes, delivering to
a webhook receiver that prints each notification as it arrives, with its latency.  The stalled rank is resumed
once its page arrived; the demo then serves until Ctrl-C (``--exit`` stops once both pages resolved).

    .venv/bin/python -m tests.e2e.cluster_demo [--nodes 8] [--ranks 128] [--dir DIR] [--exit]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

from tests._support.cluster import FAILED, STALLED, Cluster, Settings, running
from tests._support.webhook import Notification


def _show(n: Notification, c: Cluster, t_failed: float | None, t_stalled: float | None) -> None:
    for status in ("firing", "resolved"):
        for a in n.alerts(status):
            ann = a["annotations"]
            since = ""
            if status == "firing" and n.run == FAILED and t_failed:
                since = f" ({n.at - t_failed:.1f} s after rank {c.plan.failed} failed)"
            if status == "firing" and n.run == STALLED and t_stalled:
                since = f" ({n.at - t_stalled - 10:.1f} s after rank {c.plan.stalled} had stalled 10 s)"
            print(f"NOTIFICATION {status} {a['labels']['alertname']} run={n.run}{since}\n  {ann.get('summary', '')}")
            if status == "firing":
                for key in ("rank", "node", "ring", "resource", "site", "code", "dashboard", "report", "trace"):
                    print(f"    {key}: {ann.get(key, '')}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=128)
    ap.add_argument("--dir", default="")
    ap.add_argument("--exit", action="store_true", help="stop once both pages resolved")
    args = ap.parse_args(argv)
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="ringtrace-cluster-"))
    tmp.mkdir(parents=True, exist_ok=True)
    with running(Settings(nodes=args.nodes, ranks=args.ranks), tmp) as c:
        assert c.prometheus is not None and c.receiver is not None
        print(f"ringtrace cluster demo in {tmp}")
        for node in c.nodes:
            print(f"  node {node.index}: {node.root}  agent http://{node.addr}/metrics  log {node.agent.log}")
        base = c.prometheus.base
        print(f"  Prometheus   {base}  (alerts: {base}/alerts, rules: {base}/rules)")
        print(f"  Alertmanager http://127.0.0.1:{c.am_port}")
        print(f"  webhook      {c.receiver.url}  (notifications are printed below)")
        print("  try: run:ringtrace_run_verdict:worst, run:ringtrace_first_failed_rank:last_record_timestamp_seconds,"
              " rank:ringtrace_ring_stalled_near_capacity:occupancy_ratio")
        c.write_runs()
        shown, resumed, resolved = 0, False, set()
        pause = threading.Event()
        try:
            while True:
                got = c.receiver.received()
                failed = c.writer_event(FAILED, c.plan.failed, "done")
                held = c.writer_event(STALLED, c.plan.stalled, "held")
                for n in got[shown:]:
                    _show(n, c, failed["t"] if failed else None, held["t"] if held else None)
                    if n.status == "resolved":
                        resolved.add(n.run)
                shown = len(got)
                if not resumed and any(n.run == STALLED for n in got):
                    print(f"resuming rank {c.plan.stalled} of {STALLED}: its page resolves a minute later "
                          "(keep_firing_for)")
                    c.resume(STALLED, c.plan.stalled)
                    resumed = True
                if args.exit and {FAILED, STALLED} <= resolved:
                    return 0
                pause.wait(0.5)  # a person is watching: polling the receiver
        except KeyboardInterrupt:
            return 0


if __name__ == "__main__":
    sys.exit(main())
