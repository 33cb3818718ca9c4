"""A real Prometheus (Debian's ``prometheus``) scrapes a real ``ringtrace watch`` process and
evaluates the shipped rules; everything is asserted through Prometheus's HTTP API.

Runs written before the exporter starts: a healthy one, a near-capacity L3 run (rank 0 with a
proven need of 96% of a ring, rank 1 of 85%: warnings), a wedged one, a fatal one with dropped records
and a file with an unreadable line; every finished run's verdict is a series and the verdict alerts
fire on it.  A second exporter follows a run that stopped while a ring is full (the runtime's real
deadlock, written as a writer that streams would write it: no ``total`` yet) with an idle timeout
longer than the test: the live alert on a ring near capacity whose run stopped fires.  A scrape target
that nothing listens on stands for a dead exporter.  Alerts with a ``for:`` longer than the test are
asserted ``pending``; promtool's unit tests (tests/deploy) cover their timing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import bcrypt
import pytest
import yaml

from tests._support.cluster import Prometheus as PromAPI
from tests._support.cluster import http_get, poll
from tests._support.dashboards import queries, substitute
from tests._support.ports import free_port
from tests._support.require import require
from tests._support.samples import SAMPLES

ROOT = Path(__file__).resolve().parents[2]
RULES = [ROOT / "deploy" / "prometheus" / "ringtrace-alerts.yml", ROOT / "deploy" / "prometheus" /
         "ringtrace-recording.yml"]
RINGTRACE = [sys.executable, "-m", "ringtrace"]
DEADLINE = 90.0
T = TypeVar("T")


def exporter_command(paths: list[Path], addr: str, *extra: str) -> list[str]:
    """The process under test: ``ringtrace watch`` serving metrics on ``addr`` (with the advice, which a
    dashboard panel shows)."""
    return [*RINGTRACE, "watch", *map(str, paths), "--metrics-addr", addr, "--idle-timeout", "2",
            "--log-level", "info", "--host-log-glob", "*.log", "--metrics-advice", *extra]



def wait_for(what: str, check: Callable[[], T | None], logs: Callable[[], str] = lambda: "",
             timeout: float = DEADLINE) -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` and the logs at the deadline."""
    try:
        return poll(what, check, timeout, logs)
    except TimeoutError as err:
        pytest.fail(str(err))


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return f"--- {self.name} log ---\n" + self.log.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=15)


def start(name: str, cmd: list[str], tmp: Path) -> Proc:
    log = tmp / f"{name}.log"
    fh = log.open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    popen = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=tmp, env=env)
    fh.close()
    return Proc(name, popen, log)


# -- the runs -------------------------------------------------------------------------------------


def _meta(total: int, heap: int = 1024, fatal: bool = False, dropped: int = 0) -> str:
    return json.dumps({"version": 6, "fatal": fatal, "dropped": dropped, "total": total,
                       "task_window_max": [16, 16, 16, 16], "heap_max": [heap] * 4, "dep_pool_max": [64] * 4,
                       "tensormap_max": 100})


def _rec(site: str, phase: str, depth: int, tw: tuple[int, int], heap: tuple[int, int], dp: tuple[int, int],
         tm: int) -> str:
    return json.dumps({"site": site, "phase": phase, "depth": depth, "ring": min(depth, 3),
                       "task_window_start": tw[0], "task_window_end": tw[1], "heap_start": heap[0],
                       "heap_end": heap[1], "dep_pool_start": dp[0], "dep_pool_end": dp[1], "tensormap": tm})


def one_scope_run(site: str, heap_alloc: int, **meta: Any) -> str:
    """Root scope around one depth-1 scope that allocates ``heap_alloc`` bytes of ring 1's heap."""
    lines = [
        _rec("(unknown):0", "begin", 0, (0, 0), (0, 0), (1, 1), 0),
        _rec(site, "begin", 1, (0, 0), (0, 0), (1, 1), 0),
        _rec(site, "end", 1, (0, 4), (0, heap_alloc), (1, 5), 3),
        _rec("(unknown):0", "end", 0, (0, 1), (0, 64), (1, 1), 3),
    ]
    return "\n".join([_meta(len(lines) + meta.get("dropped", 0), **meta), *lines]) + "\n"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    path.write_bytes(text)
    return path


FLOW_FILE = (SAMPLES / "failed" / "NestedScopes_window4_flow_control_deadlock" / "dfx_outputs" / "scope_stats" /
             "scope_stats.jsonl")


def stalled_run(root: Path) -> Path:
    """The runtime's deadlock with task window 4 (ring 3's window full at its last record), its metadata line
    without ``total`` as a writer that streams would write it: the reader cannot tell it ended, so the run stays
    open until the idle timeout."""
    lines = FLOW_FILE.read_text().splitlines(keepends=True)
    meta = json.loads(lines[0])
    del meta["total"]
    return write(root / "stalled" / "dfx_outputs" / "scope_stats" / "scope_stats.jsonl",
                 json.dumps(meta) + "\n" + "".join(lines[1:]))


def make_runs(root: Path) -> list[Path]:
    l2 = ("dfx_outputs", "scope_stats", "scope_stats.jsonl")
    return [
        write(root.joinpath("healthy", *l2),
              (SAMPLES / "outputs" / "TestScopeStats_default_20261130_101210" / "scope_stats" /
               "scope_stats.jsonl").read_bytes()),
        write(root / "near" / "dfx_outputs" / "rank0" / "d0" / "scope_stats" / "scope_stats.jsonl",
              one_scope_run("near_orch.cpp:10", 980)),  # 980 / 1024 = 95.7%: critical
        write(root / "near" / "dfx_outputs" / "rank1" / "d0" / "scope_stats" / "scope_stats.jsonl",
              one_scope_run("near_orch.cpp:10", 870)),  # 85%: warning
        write(root.joinpath("wedged", *l2), FLOW_FILE.read_bytes()),
        write(root / "wedged" / "host.log",  # its host log: the failed-runs tables
              (SAMPLES / "failed" / "NestedScopes_window4_flow_control_deadlock" / "host.log").read_bytes()),
        write(root.joinpath("fatal", *l2), one_scope_run("f.cpp:3", 100, fatal=True, dropped=3)),
        write(root.joinpath("garbled", *l2), one_scope_run("g.cpp:1", 10).replace("\n", "\n{not json\n", 1)),
    ]


# -- the stack ------------------------------------------------------------------------------------


def prometheus_config(path: Path, jobs: list[dict[str, Any]]) -> Path:
    cfg = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
           "rule_files": [str(p) for p in RULES], "scrape_configs": jobs}
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def start_prometheus(tmp: Path, config: Path) -> tuple[Proc, PromAPI]:
    exe = shutil.which("prometheus")
    assert exe is not None
    port = free_port()
    proc = start("prometheus", [exe, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], tmp)
    api = PromAPI(port)
    wait_for("prometheus ready", lambda: proc.popen.poll() is None and
             http_get(f"{api.base}/-/ready")[0] == 200, proc.text)
    return proc, api


def ready(addr: str, proc: Proc) -> Callable[[], bool]:
    """The check that ``proc``, serving on ``addr``, is up and answers /readyz."""
    return lambda: proc.popen.poll() is None and http_get(f"http://{addr}/readyz")[0] == 200


@dataclass
class Stack:
    api: PromAPI
    exporter: str
    live: str
    dead: str
    logs: Callable[[], str]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require(shutil.which("prometheus") is not None, "prometheus server not installed (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("prom-e2e")
    runs = tmp / "runs"
    make_runs(runs)
    stalled_run(tmp / "live")
    exporter = f"127.0.0.1:{free_port()}"
    live = f"127.0.0.1:{free_port()}"
    dead = f"127.0.0.1:{free_port()}"
    procs: list[Proc] = []
    try:
        rt = start("ringtrace", exporter_command([runs], exporter), tmp)
        procs.append(rt)
        rt_live = start("ringtrace-live", [*exporter_command([tmp / "live"], live), "--idle-timeout", "3600"], tmp)
        procs.append(rt_live)
        for addr, proc in ((exporter, rt), (live, rt_live)):
            wait_for(f"ringtrace /readyz on {addr}", ready(addr, proc), proc.text)
        config = prometheus_config(tmp / "prometheus.yml", [
            {"job_name": "ringtrace", "static_configs": [{"targets": [exporter, live, dead]}]}])
        prom, api = start_prometheus(tmp, config)
        procs.append(prom)

        def logs() -> str:
            return "\n".join(p.text() for p in procs)

        wait_for("all seven runs scraped", lambda: api.value("count(ringtrace_run_scopes)") == 7, logs)
        # the targets are scraped independently: wait for the dead one's first (failed) scrape too
        wait_for("the dead target scraped", lambda: api.value(f'up{{instance="{dead}"}}') is not None, logs)
        yield Stack(api, exporter, live, dead, logs)
    finally:
        for p in reversed(procs):
            p.stop()


# -- series ---------------------------------------------------------------------------------------


def test_series_have_the_files_values(stack: Stack) -> None:
    api = stack.api
    v = api.value
    assert v(f'up{{instance="{stack.exporter}"}}') == 1
    assert v(f'up{{instance="{stack.dead}"}}') == 0
    near = 'run="near",rank="0",dispatch="0",ring="1"'
    sizes = api.query('ringtrace_run_sizes_info{run="near",rank="1"}')  # the capacities: one info series
    assert [(r["metric"]["heap_bytes"].split(",")[1], r["metric"]["task_window"].split(",")[1]) for r in sizes] == [
        ("1024", "16")]
    assert v(f'ringtrace_ring_high_water_ratio{{{near},resource="heap"}}') == pytest.approx(980 / 1024)
    assert v(f'ringtrace_ring_need_ratio{{{near},resource="heap"}}') == pytest.approx(980 / 1024)
    assert v('count(ringtrace_ring_occupancy_ratio{run="near"})') is None  # occupancy: open runs only
    assert v('ringtrace_ring_need_ratio{run="near",rank="1",ring="1",resource="heap"}') == pytest.approx(870 / 1024)
    healthy_max = v('max(ringtrace_ring_need_ratio{run="healthy"})')
    assert healthy_max is not None and healthy_max < 0.01
    verdicts = {(r["metric"]["run"], r["metric"].get("rank", "")): (r["metric"]["kind"], r["metric"]["severity"])
                for r in api.query("ringtrace_run_verdict == 1")}
    assert verdicts == {("healthy", ""): ("healthy", "ok"), ("garbled", ""): ("healthy", "ok"),
                        ("near", "0"): ("near_capacity", "warning"), ("near", "1"): ("near_capacity", "warning"),
                        ("wedged", ""): ("wedged", "error"), ("fatal", ""): ("failed", "error")}  # none while open
    assert v('ringtrace_wedged_scopes{run="wedged"}') == 5
    inner = api.query('ringtrace_wedged_innermost_scope_info{run="wedged"}')
    assert [(r["metric"]["site"], r["metric"]["depth"], r["metric"]["ring"]) for r in inner] == [
        ("nested_dummy_small_orch.cpp:75", "4", "3")]
    assert v('ringtrace_run_open_scopes{run="wedged"}') is None  # the wedged scopes say it once finished
    assert v('ringtrace_run_dropped_records{run="fatal"}') == 3
    assert [r["metric"]["reason"] for r in api.query('ringtrace_run_info{run="healthy"}')] == ["complete"]
    assert v('ringtrace_parse_errors_total{reason="invalid_record"}') == 1
    mine = f'instance="{stack.exporter}"'
    assert v(f"ringtrace_files_watched{{{mine}}}") == 6
    assert v(f"ringtrace_records_read_total{{{mine}}}") == 4 + 4 + 4 + 5 + 4 + 4
    assert v(f'ringtrace_sink_errors_total{{{mine},sink="prometheus"}}') == 0
    assert v("count(ringtrace_build_info)") == 2
    # the run that stopped with ring 3's window full: open, where it submits, and since when no record came
    assert [r["metric"].get("reason", "") for r in api.query('ringtrace_run_info{run="stalled"}')] == [""]
    assert v('ringtrace_ring_occupancy_ratio{run="stalled",ring="3",resource="task_window"}') == 1
    assert [r["metric"]["site"] for r in api.query('ringtrace_open_innermost_scope_info{run="stalled"}')] == [
        "nested_dummy_small_orch.cpp:75"]
    now = time.time()
    updated = v('ringtrace_run_last_record_timestamp_seconds{run="healthy"}')
    assert updated is not None and now - 300 < updated <= now


def test_recording_rules_evaluate(stack: Stack) -> None:
    """The rules' values from an evaluation after both targets were scraped with every run (the stack waited
    for that before the test began).  Waiting for one rule's series alone was not enough: an evaluation
    between the two targets' first scrapes leaves the first target's rules and none of the second's (seen in
    CI: ``near``'s rule present, ``stalled``'s missing)."""
    api = stack.api
    since = time.time()
    wait_for("a rule evaluation after every run was scraped",
             lambda: (api.value('timestamp(run:ringtrace_wedged_scopes:sum{run="wedged"})') or 0) >= since,
             stack.logs)
    assert api.value('run_ring:ringtrace_ring_need_ratio:max{run="near",ring="1"}') == pytest.approx(980 / 1024)
    assert api.value('run_ring:ringtrace_ring_occupancy_ratio:max{run="stalled",ring="3"}') == 1
    assert api.value('run:ringtrace_wedged_scopes:sum{run="wedged"}') == 5
    assert api.value('kind_severity:ringtrace_run_verdict:count{kind="near_capacity",severity="warning"}') == 2
    assert api.value('run:ringtrace_run_verdict_error:count{run="fatal"}') == 1


# -- alerts ---------------------------------------------------------------------------------------


def _key(a: dict[str, Any]) -> tuple[str, str, str, str]:
    lab = a["labels"]
    return (lab["alertname"], lab.get("severity", ""), lab.get("run", lab.get("instance", "")), lab.get("rank", ""))


EXPECTED = {  # one alert per run (labels: alertname, run, severity), however many of its ranks
    ("RingtraceRunVerdictError", "critical", "wedged", ""): {"firing"},  # with its host log: FLOW_CONTROL_DEADLOCK
    ("RingtraceRunVerdictError", "critical", "fatal", ""): {"firing"},
    ("RingtraceRunVerdictWarning", "warning", "near", ""): {"firing"},  # ranks 0 and 1
    ("RingtraceRingNearCapacityStalled", "critical", "stalled", ""): {"firing"},  # no record for 10 s, window full
}


def test_expected_alerts_and_no_others(stack: Stack) -> None:
    api = stack.api
    dead_key = ("RingtraceExporterDown", "warning", stack.dead, "")
    parse_key = ("RingtraceParseErrors", "warning", stack.exporter, "")

    def all_there() -> list[dict[str, Any]] | None:
        alerts = api.alerts()
        keys = {_key(a) for a in alerts}
        return alerts if set(EXPECTED) | {dead_key, parse_key} <= keys else None

    alerts = wait_for("the expected alerts", all_there, stack.logs)
    by_key: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for a in alerts:
        by_key.setdefault(_key(a), []).append(a)
    for key, states in EXPECTED.items():
        assert len(by_key[key]) == 1, (key, by_key[key])
        assert by_key[key][0]["state"] in states, (key, by_key[key][0]["state"])
    assert by_key[dead_key][0]["state"] == "pending"  # for: 5m
    assert by_key[parse_key][0]["labels"]["reason"] == "invalid_record"
    # nothing else: no healthy-run alert, no exporter errors, no alert about the live exporter being down
    unexpected = set(by_key) - set(EXPECTED) - {dead_key, parse_key}
    assert not unexpected, unexpected
    assert not [a for a in alerts if a["labels"].get("run") in ("healthy", "garbled")]
    wedged = by_key["RingtraceRunVerdictError", "critical", "wedged", ""][0]
    assert wedged["labels"] == {"alertname": "RingtraceRunVerdictError", "run": "wedged", "severity": "critical"}
    ann = wedged["annotations"]
    assert (ann["kind"], ann["ring"], ann["site"], ann["code"]) == (
        "wedged", "3", "nested_dummy_small_orch.cpp:75", "3 FLOW_CONTROL_DEADLOCK")
    assert ann["summary"] == "Run wedged failed: wedged (FLOW_CONTROL_DEADLOCK)"
    assert ("wedged in nested_dummy_small_orch.cpp:75 (depth 4, ring 3, line 6): FLOW_CONTROL_DEADLOCK"
            in ann["description"])
    assert ann["runbook_url"].endswith("#alert-ringtracerunverdicterror")
    near = by_key["RingtraceRunVerdictWarning", "warning", "near", ""][0]
    assert near["annotations"]["description"].startswith("2 rank(s) of run near finished with a warning.")
    assert near["annotations"]["rank"] in ("0", "1")
    stalled = by_key["RingtraceRingNearCapacityStalled", "critical", "stalled", ""][0]
    ann = stalled["annotations"]
    assert (ann["ring"], ann["resource"], ann["site"]) == ("3", "task_window", "nested_dummy_small_orch.cpp:75")
    assert ann["summary"] == "Run stalled stopped with ring 3 task_window at 100%"


# -- dashboards against the live server -----------------------------------------------------------


def test_every_dashboard_query_returns_data(stack: Stack) -> None:
    """Each panel and query variable of every dashboard shows something for the near-capacity, the wedged, the
    stalled or the fatal run (rates need a few scrapes; the advice panels need --metrics-advice, which the exporters
    here run with; the dropped records panels the fatal run's dropped records)."""
    api = stack.api
    every = queries()
    assert len(every) >= 30
    empty: list[str] = []

    def panels_without_data() -> bool:
        empty.clear()
        for q in every:
            results = []
            for run in ("near", "wedged", "stalled", "fatal"):
                values = {"__rate_interval": "1m", "run": run, "rank": ".*", "dispatch": ".*", "instance": ".*"}
                results.extend(api.query(substitute(q.expr, values)))  # raises if Prometheus rejects it
            if not results:
                empty.append(f"{q.dashboard} {q.where}")
        return not empty

    wait_for("every panel to have data", panels_without_data, lambda: f"panels without data: {empty}")


# -- TLS and basic auth, scraped by Prometheus -----------------------------------------------------


def _openssl(tmp: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=tmp, check=True, capture_output=True, timeout=60)


def test_prometheus_scrapes_through_tls_and_basic_auth(tmp_path: Path) -> None:
    require(shutil.which("prometheus") is not None, "prometheus server not installed (Debian package prometheus)")
    require(shutil.which("openssl") is not None, "openssl CLI not installed")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(tmp_path, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=ca")
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl(tmp_path, "req", *ec, "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=ringtrace")
    _openssl(tmp_path, "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "tls.crt", "-days", "2", "-extfile", "san.ext")
    hashed = bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(rounds=10)).decode()
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n"
                   f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    (tmp_path / "good.pw").write_text("scrape-me")
    (tmp_path / "bad.pw").write_text("wrong")
    runs = tmp_path / "runs"
    make_runs(runs)
    exporter = f"127.0.0.1:{free_port()}"
    procs: list[Proc] = []
    try:
        rt = start("ringtrace", exporter_command([runs], exporter, "--web-config", str(web)), tmp_path)
        procs.append(rt)
        ctx_url = f"https://{exporter}/readyz"
        import ssl

        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        wait_for("ringtrace /readyz over TLS",
                 lambda: rt.popen.poll() is None and urllib.request.urlopen(ctx_url, context=ctx, timeout=5).status
                 == 200, rt.text)
        tls = {"scheme": "https", "tls_config": {"ca_file": str(tmp_path / "ca.crt")},
               "static_configs": [{"targets": [exporter]}]}
        config = prometheus_config(tmp_path / "prometheus.yml", [
            {"job_name": "ringtrace", **tls, "basic_auth": {"username": "prometheus",
                                                            "password_file": str(tmp_path / "good.pw")}},
            {"job_name": "wrong-password", **tls, "basic_auth": {"username": "prometheus",
                                                                 "password_file": str(tmp_path / "bad.pw")}},
            {"job_name": "no-tls", "static_configs": [{"targets": [exporter]}]},
        ])
        prom, api = start_prometheus(tmp_path, config)
        procs.append(prom)

        def logs() -> str:
            return "\n".join(p.text() for p in procs)

        wait_for("scrapes of all three jobs", lambda: api.value('count(up{job=~"ringtrace|wrong-password|no-tls"})')
                 == 3, logs)
        assert api.value('up{job="ringtrace"}') == 1
        assert api.value('up{job="wrong-password"}') == 0
        assert api.value('up{job="no-tls"}') == 0
        assert api.value('ringtrace_wedged_scopes{job="ringtrace",run="wedged"}') == 5
    finally:
        for p in reversed(procs):
            p.stop()
