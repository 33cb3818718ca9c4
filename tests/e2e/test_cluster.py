"""The cluster end to end on real parts (tests/_support/cluster.py): 8 agents, four L3 runs of 128 ranks spread
over them and written live, a real Prometheus scraping every agent with the shipped rules and intervals, a real
Alertmanager with the shipped routes delivering to a webhook receiver on 127.0.0.1.

One timeline (the module's fixture) is observed, then asserted piece by piece (every dashboard query is answered
over it too): the failed run pages once, its
rank stalled near capacity is inhibited, the stalled run pages once, the healthy and the streaming runs page
never, and both pages resolve when their series go (the agents' ``--series-ttl`` is 60 s here, the stalled rank
is resumed once its page arrived).  Latencies are measured, written to ``test-artifacts/cluster/latency.json``
and printed, never asserted (docs/operations.md, "Alert latency", has the figures).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests._support.cluster import FAILED, HEALTHY, RUNS, STALLED, STREAMING, Cluster, Settings, poll, running
from tests._support.dashboards import queries, substitute
from tests._support.require import require
from tests._support.webhook import Notification

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "cluster"
DEADLINE = 240.0  # seconds: a deadline for conditions, never a bound on what is measured
DEADLINE_RANGE = "30m"  # a range over the whole harness (its Prometheus started with it): what was ever seen

pytestmark = pytest.mark.slow


@dataclass
class Timeline:
    cluster: Cluster
    started_at: float  # wall time when the writers were started
    notifications: list[Notification]
    failed_at: float  # the writer's wall time after the failed rank's file was written
    stalled_at: float  # ... after the stalled rank's last record before its stop
    failed_paged: Notification
    stalled_paged: Notification
    inhibited: dict[str, Any]  # Alertmanager's view of the failed run's stalled alert
    prometheus_alerts: list[dict[str, Any]]  # Prometheus's alerts when the inhibition was seen

    def of(self, run: str) -> list[Notification]:
        return [n for n in self.notifications if n.run == run]


def _paged(c: Cluster, run: str, status: str) -> Notification | None:
    assert c.receiver is not None
    return next((n for n in c.receiver.received() if n.run == run and n.status == status), None)


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Timeline]:
    require(shutil.which("prometheus") is not None, "prometheus not installed (Debian package prometheus)")
    require(shutil.which("prometheus-alertmanager") is not None,
            "alertmanager not installed (Debian package prometheus-alertmanager)")
    with running(Settings(), tmp_path_factory.mktemp("cluster")) as c:
        yield observe(c)


def observe(c: Cluster) -> Timeline:
    """Write the runs and follow them until both pages resolved; the latencies go to latency.json."""
    plan = c.plan
    started = time.time()
    c.write_runs()
    failed = poll("the failed run's page", lambda: _paged(c, FAILED, "firing"), DEADLINE, c.logs)
    assert c.alertmanager is not None and c.prometheus is not None and c.receiver is not None
    am, prom, receiver = c.alertmanager, c.prometheus, c.receiver

    def stalled_in_failed_run() -> dict[str, Any] | None:
        return next((a for a in am.alerts() if a["labels"]["alertname"] == "RingtraceRingNearCapacityStalled"
                     and a["labels"].get("run") == FAILED), None)

    inhibited = poll("the failed run's stalled rank in Alertmanager", stalled_in_failed_run, DEADLINE, c.logs)
    prom_alerts = prom.alerts()
    stalled = poll("the stalled run's page", lambda: _paged(c, STALLED, "firing"), DEADLINE, c.logs)
    c.resume(STALLED, plan.stalled)
    for run in (FAILED, STALLED):
        poll(f"{run}'s page resolved", lambda run=run: _paged(c, run, "resolved"), DEADLINE,  # type: ignore[misc]
             c.logs)
    failed_done = c.writer_event(FAILED, plan.failed, "done")
    stalled_held = c.writer_event(STALLED, plan.stalled, "held")
    assert failed_done is not None and stalled_held is not None
    tl = Timeline(c, started, receiver.received(), failed_done["t"], stalled_held["t"], failed, stalled, inhibited,
                  prom_alerts)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    latency = {"failed_run_page_s": round(failed.at - tl.failed_at, 1),
               "stalled_run_page_after_last_record_s": round(stalled.at - tl.stalled_at, 1),
               "stalled_run_page_after_10s_stall_s": round(stalled.at - tl.stalled_at - 10, 1),
               "intervals": "scrape 10s, evaluation 10s, group_wait 5s (shipped)"}
    (ARTIFACTS / "latency.json").write_text(json.dumps(latency, indent=2) + "\n")
    print(f"cluster alert latency: {latency}")
    return tl


def after_the_page(timeline: Timeline) -> float:
    """A moment just after the ringtrace-cluster group's first evaluation after the failed run's page: its rules
    (the run's worst verdict, the verdict counts) are evaluated apart from the alerts' group, so at the page itself
    they may still be an evaluation behind; later the failed rank's series expire (the harness's --series-ttl)."""
    prom = timeline.cluster.prometheus
    assert prom is not None
    first = poll("the cluster rules evaluated after the page",
                 lambda: prom.first_evaluation_after("ringtrace-cluster", timeline.failed_paged.at), timeout=60)
    return first + 1.0  # its samples, not the next evaluation's (10 s later)


def annotations_of(n: Notification) -> dict[str, str]:
    [alert] = n.alerts()
    return dict(alert["annotations"])


def test_a_failing_run_pages_once_and_its_page_resolves(timeline: Timeline) -> None:
    for run, alertname in ((FAILED, "RingtraceRunVerdictError"), (STALLED, "RingtraceRingNearCapacityStalled")):
        sent = timeline.of(run)
        assert [n.status for n in sent] == ["firing", "resolved"], [(n.status, n.body["alerts"]) for n in sent]
        for n in sent:
            assert n.body["groupLabels"] == {"run": run}
            assert [a["labels"]["alertname"] for a in n.body["alerts"]] == [alertname]
            assert n.body["alerts"][0]["labels"] == {"alertname": alertname, "run": run, "severity": "critical"}
        firing, resolved = sent
        assert firing.alerts()[0]["startsAt"] == resolved.alerts("resolved")[0]["startsAt"]  # one alert, not two


def test_healthy_and_streaming_runs_page_never(timeline: Timeline) -> None:
    assert {n.run for n in timeline.notifications} == {FAILED, STALLED}
    prom = timeline.cluster.prometheus
    assert prom is not None
    ranks = timeline.cluster.settings.ranks
    for run in (HEALTHY, STREAMING):  # they were there: every rank finished, each verdict ok (seen over the run:
        # when the pages come depends on the machine's speed, not on when these runs finish)
        verdicts = prom.query(f'count by (rank, dispatch, severity) (max_over_time(ringtrace_run_verdict{{run="{run}"}}'
                              f'[{DEADLINE_RANGE}]))')
        assert len({(v["metric"]["rank"], v["metric"]["dispatch"]) for v in verdicts}) == ranks, run
        assert {v["metric"]["severity"] for v in verdicts} == {"ok"}, run


def test_the_failed_runs_page_names_its_first_failed_rank(timeline: Timeline) -> None:
    c = timeline.cluster
    rank = c.plan.failed
    ann = annotations_of(timeline.failed_paged)
    node = c.node_of(rank).addr
    assert (ann["rank"], ann["dispatch"], ann["node"]) == (str(rank), "0", node)
    assert (ann["ring"], ann["resource"], ann["site"], ann["code"]) == ("3", "heap", "moe_layer_orch.cpp:114",
                                                                       "2 HEAP_RING_DEADLOCK")
    assert ann["summary"] == f"Run {FAILED} failed: rank {rank} wedged (HEAP_RING_DEADLOCK)"
    assert "HEAP_RING_DEADLOCK" in ann["description"] and f"rank {rank} dispatch 0 on {node}" in ann["description"]
    assert ann["dashboard"].endswith(f"/d/ringtrace-run/ringtrace-run?var-run={FAILED}&var-rank={rank}")
    assert ann["report"] == f"http://{node}/report/{FAILED}/{rank}/0"
    assert ann["trace"] == f"https://ui.perfetto.dev/#!/?url=http://{node}/trace/{FAILED}/{rank}/0"


def test_the_stalled_runs_page_names_the_stalled_rank(timeline: Timeline) -> None:
    c = timeline.cluster
    rank = c.plan.stalled
    ann = annotations_of(timeline.stalled_paged)
    assert (ann["rank"], ann["node"], ann["ring"], ann["resource"], ann["site"]) == (
        str(rank), c.node_of(rank).addr, "3", "heap", "paged_attention_orch.cpp:91")
    assert ann["summary"] == f"Run {STALLED} rank {rank} stopped with ring 3 heap at 100%"
    assert ann["dashboard"].endswith(f"var-run={STALLED}&var-rank={rank}")


def test_a_failed_run_inhibits_its_own_stalled_alert(timeline: Timeline) -> None:
    """The failed run's other rank stopped near capacity after the failure: Prometheus fires the stalled alert
    for the run, Alertmanager holds it suppressed by the run's error, and no notification carries it."""
    a = timeline.inhibited
    assert a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"], a
    firing = {(x["labels"]["alertname"], x["labels"]["run"]) for x in timeline.prometheus_alerts
              if x["state"] == "firing"}
    assert {("RingtraceRunVerdictError", FAILED), ("RingtraceRingNearCapacityStalled", FAILED)} <= firing
    sent = {a["labels"]["alertname"] for n in timeline.of(FAILED) for a in n.body["alerts"]}
    assert sent == {"RingtraceRunVerdictError"}


def test_pages_come_after_their_events(timeline: Timeline) -> None:
    """Order only: the latency itself is measured (latency.json), not bounded here."""
    assert timeline.failed_paged.at > timeline.failed_at
    assert timeline.stalled_paged.at > timeline.stalled_at + 10  # a stall is 10 s without a record


def test_recording_rules_join_the_ranks_across_nodes(timeline: Timeline) -> None:
    """Over the whole timeline: the failed run's two failed ranks (the failed one, and the one its idle timeout
    finished, cut short, once the first one's series had gone), both held ranks stalled; the first rank to fail and
    the runs' verdicts when the pages went out."""
    c = timeline.cluster
    prom = c.prometheus
    assert prom is not None

    def most(rule: str, run: str) -> float | None:
        res = prom.query(f'max_over_time({rule}{{run="{run}"}}[10m])')
        return float(res[0]["value"][1]) if len(res) == 1 else None

    def ranks(expr: str) -> set[str]:
        return {r["metric"]["rank"] for r in prom.query(f"count by (rank) (max_over_time({expr}[10m]))")}

    # the failed rank, then the one its idle timeout finished (after the first one's series had gone): short of
    # the records its metadata promised, that one is cut short (an error), not wedged
    both = {str(c.plan.failed), str(c.plan.wedged)}
    assert ranks(f'rank:ringtrace_rank_failed:last_record_timestamp_seconds{{run="{FAILED}"}}') == both
    assert ranks(f'ringtrace_wedged_innermost_scope_info{{run="{FAILED}"}}') == {str(c.plan.failed)}
    kinds = prom.query(f'count by (kind) (max_over_time(ringtrace_run_verdict{{run="{FAILED}",rank="{c.plan.wedged}"}}'
                       '[10m]))')
    assert [k["metric"]["kind"] for k in kinds] == ["cut_short"]
    assert most("run:ringtrace_ranks_failed:count", FAILED) == 1
    assert most("run:ringtrace_ranks_wedged:count", FAILED) == 1
    for run in (FAILED, STALLED):
        assert most("run:ringtrace_ranks_stalled:count", run) == 1, run
    for run in (HEALTHY, STREAMING):
        assert most("run:ringtrace_ranks_failed:count", run) is None, run
    [first] = prom.query(f'run:ringtrace_first_failed_rank:last_record_timestamp_seconds{{run="{FAILED}"}}',
                         at=timeline.failed_paged.at)
    assert (first["metric"]["rank"], first["metric"]["instance"]) == (str(c.plan.failed),
                                                                       c.node_of(c.plan.failed).addr)
    seen = prom.query(f"count by (run, verdict) (max_over_time(run:ringtrace_run_verdict:worst[{DEADLINE_RANGE}]))")
    verdicts = {run: {r["metric"]["verdict"] for r in seen if r["metric"]["run"] == run} for run in RUNS}
    assert verdicts[HEALTHY] - {"running"} == {"ok"} and verdicts[STREAMING] - {"running"} == {"ok"}, verdicts
    assert "error" in verdicts[FAILED] and "running" in verdicts[STALLED], verdicts
    [failed_then] = prom.query(f'run:ringtrace_run_verdict:worst{{run="{FAILED}"}}', at=after_the_page(timeline))
    assert failed_then["metric"]["verdict"] == "error"
    at = timeline.stalled_paged.at
    [stalled_then] = prom.query(f'run:ringtrace_run_verdict:worst{{run="{STALLED}"}}', at=at)
    assert stalled_then["metric"]["verdict"] == "running"
    worst = prom.query(f'run_ring_resource:ringtrace_ring_high_water_ratio:worst_rank{{run="{STALLED}",ring="3",'
                       f'resource="heap"}}', at=at)
    assert len(worst) == 1 and float(worst[0]["value"][1]) >= 1.0
    # each run's ranks came from every node
    for run in RUNS:
        nodes = prom.query(f'count by (instance) (max_over_time(ringtrace_run_records{{run="{run}"}}[10m]))')
        assert len(nodes) == c.settings.nodes, run


NOT_IN_CLUSTER = {
    ("ringtrace-overview.json", "Runs with dropped records"): "no rank drops records",
    ("ringtrace-overview.json", "Errors per second"): "no unreadable line (target A; B: every sink's count, 0)",
    ("ringtrace-run.json", "Recommended capacity"): "the agents run without --metrics-advice, its default",
}
"""Panels reading series the cluster's runs do not make: tests/e2e/test_prometheus_server.py has data for them."""


def test_every_dashboard_query_returns_data(timeline: Timeline) -> None:
    """Every panel target and query variable of every dashboard, its variables set as a user following the failed
    run's page sets them (its run, all its ranks and dispatches, the node of its first failed rank), evaluated
    over the timeline as Grafana draws a panel (every scrape interval): each one has data, but for the panels
    reading series the cluster's runs do not make (NOT_IN_CLUSTER, exactly those), which Prometheus must still
    accept.  How many series each query gave: test-artifacts/cluster/dashboard_queries.json."""
    c = timeline.cluster
    prom = c.prometheus
    assert prom is not None
    values = {"run": FAILED, "rank": ".*", "dispatch": ".*", "instance": c.node_of(c.plan.failed).addr,
              "__rate_interval": "1m"}
    every = queries()
    assert {q.dashboard for q in every} == {"ringtrace-cluster.json", "ringtrace-overview.json", "ringtrace-run.json"}
    end = time.time()
    empty: set[tuple[str, str]] = set()
    answered = {}
    for q in every:
        series = prom.query_range(substitute(q.expr, values), timeline.started_at, end, 10)  # raises if rejected
        answered[f"{q.dashboard} {q.where}"] = len(series)
        if not series:
            empty.add((q.dashboard, q.title))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "dashboard_queries.json").write_text(json.dumps(answered, indent=2) + "\n")
    assert empty - set(NOT_IN_CLUSTER) == set(), f"panels without data: {sorted(empty - set(NOT_IN_CLUSTER))}"
    assert set(NOT_IN_CLUSTER) - empty == set(), "these have data in the cluster now: take them off NOT_IN_CLUSTER"


def test_the_cluster_view_shows_the_failed_run(timeline: Timeline) -> None:
    """The cluster view's tables, as Grafana asks for them when the failed run paged: the run's verdict, its worst
    rank per ring on the rank's node, its failed ranks and first of them (the rank the page names)."""
    c = timeline.cluster
    prom = c.prometheus
    assert prom is not None
    at = after_the_page(timeline)
    by_title = {q.title: q.expr for q in queries() if q.dashboard == "ringtrace-cluster.json"}

    def ask(title: str) -> list[dict[str, Any]]:
        return prom.query(substitute(by_title[title], {"run": ".*"}), at=at)

    [failing] = ask("Runs failing")
    assert float(failing["value"][1]) == 1
    [first] = ask("The rank that failed first")
    m = first["metric"]
    assert (m["run"], m["rank"], m["instance"], m["kind"]) == (FAILED, str(c.plan.failed),
                                                                c.node_of(c.plan.failed).addr, "wedged")
    assert timeline.started_at <= float(first["value"][1]) / 1000 <= at  # when its last record was read, in ms
    assert str(c.plan.failed) in {r["metric"]["rank"] for r in ask("Failed ranks") if r["metric"]["run"] == FAILED}
    worst = {(r["metric"]["run"], r["metric"]["ring"], r["metric"]["resource"]): r["metric"]["rank"]
             for r in ask("Worst rank per ring and resource: high water / usable capacity")}
    assert {run for run, _, _ in worst} >= {HEALTHY, STREAMING, FAILED}
