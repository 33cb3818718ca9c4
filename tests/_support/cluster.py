"""A ringtrace cluster on one machine, on real parts: what ``make cluster-demo`` starts and tests/e2e/test_cluster.py
asserts.

* **Nodes**: N agents (``ringtrace watch``, 8 by default), each following its own node's tree
  ``<tmp>/node<i>/`` with ``--state-dir`` and serving /metrics on 127.0.0.1.
* **Runs**: L3 runs of R ranks (128 by default; ``<run>/dfx_outputs/rank<N>/d0/scope_stats/``) spread over
  the nodes, R / N consecutive ranks a node, written live by one real writer process a node
  (tests/_support/cluster_writer.py) from files the runtime's simulator (:mod:`ringtrace.demo.sim`) makes:
  :data:`HEALTHY` (every rank healthy), :data:`STREAMING` (every rank streams with rings near full, records
  flowing), :data:`FAILED` (rank :attr:`Plan.failed` wedges on a full heap and its host log reports
  HEAP_RING_DEADLOCK; rank :attr:`Plan.wedged` then stops near capacity and is never resumed, as a rank blocked
  on a dead peer: the idle timeout finishes it short of its metadata's total, cut short),
  :data:`STALLED` (rank :attr:`Plan.stalled` stops with ring 3's heap full, held until resumed).
* **Prometheus** (Debian's ``prometheus``) with deploy/prometheus/prometheus.yml's intervals and rule files,
  scraping every agent; **Alertmanager** (Debian's ``prometheus-alertmanager``) with
  deploy/alertmanager/alertmanager.yml, its receiver pointed at a webhook :class:`~tests._support.webhook.Receiver`
  on 127.0.0.1.

What differs from the shipped settings, and why (:class:`Settings`): the agents' ``--series-ttl`` (60 s, not
900: a run's page resolves when its series go, and the test waits for that), their ``--idle-timeout`` (60 s, not
30: a stalled rank is resumed only once its page arrived, up to ~35 s after it stopped at the shipped
intervals, and 30 s would first finish it as wedged) and the runs route's ``group_interval`` (2 s, not 1 min:
the resolutions are sent at the group's next interval).  Scrape and evaluation intervals and ``group_wait`` are
the shipped ones, so the latencies measured are the shipped ones.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import yaml

from ringtrace.demo.sim import blocks, host_log_text, named, outcome
from tests._support.ports import free_port
from tests._support.webhook import Receiver

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
ALERTMANAGER_YML = DEPLOY / "alertmanager" / "alertmanager.yml"
WRITER = Path(__file__).resolve().parent / "cluster_writer.py"
ALERTMANAGER_EXE = "prometheus-alertmanager"  # Debian's name; upstream's binary is `alertmanager`
T = TypeVar("T")

HEALTHY, STREAMING, FAILED, STALLED = "llm_healthy", "llm_streaming", "llm_failed", "llm_stalled"
RUNS = (HEALTHY, STREAMING, FAILED, STALLED)

SMALL_HEALTHY = msgspec.structs.replace(named("healthy"), loops=(2, 3, 2))
"""43 lines, 9 KB: the compile-default rings, nothing near full."""
SMALL_TIGHT = msgspec.structs.replace(named("tight"), loops=(2, 6, 4))
"""127 lines, 28 KB: small rings the allocator streams through near full (a healthy verdict)."""
STOP_LINE = 51
"""The line of SMALL_TIGHT (1-based, the metadata line first) after which a held rank stops: the begin of a
depth-3 scope with ring 3's heap full (100%)."""
WEDGE = named("wedge")
"""92 lines: ring 3's heap deadlocks (HEAP_RING_DEADLOCK, orch_error_code=2) in moe_layer_orch.cpp:114."""


@dataclass(frozen=True)
class Settings:
    nodes: int = 8
    ranks: int = 128
    series_ttl: float = 60.0  # shipped: 900 (see the module docstring)
    idle_timeout: float = 60.0  # shipped: 30
    group_interval: str | None = "2s"  # the runs route's; None: the shipped 1m
    pace: float = 1.0  # seconds between a writer's rounds
    streaming_pieces: int = 10  # writes of a streaming rank's file, a round apart


@dataclass(frozen=True)
class Plan:
    """Which ranks do what (scaled from 128 ranks: 37, 38 and 85)."""

    ranks: int

    @property
    def failed(self) -> int:
        return self.ranks * 37 // 128

    @property
    def wedged(self) -> int:
        return self.failed + 1

    @property
    def stalled(self) -> int:
        return self.ranks * 85 // 128


def _line_ends(data: bytes) -> list[int]:
    out, at = [], 0
    while (at := data.find(b"\n", at) + 1) > 0:
        out.append(at)
    return out


def stage(tmp: Path) -> dict[str, Path]:
    """The files the writers copy from, made once by the simulator (not watched by any agent)."""
    tmp.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, scn in (("healthy", SMALL_HEALTHY), ("tight", SMALL_TIGHT), ("wedge", WEDGE)):
        out[name] = tmp / f"{name}.jsonl"
        out[name].write_bytes(b"".join(blocks(scn)))
    out["wedge.log"] = tmp / "wedge.host.log"
    out["wedge.log"].write_text(host_log_text(WEDGE, outcome(WEDGE)))
    return out


def rank_dir(node_root: Path, run: str, rank: int) -> Path:
    return node_root / run / "dfx_outputs" / f"rank{rank}" / "d0"


def node_plan(settings: Settings, node: int, node_root: Path, staged: dict[str, Path]) -> dict[str, Any]:
    """The writer's plan for ``node``: its ranks of every run (see :mod:`tests._support.cluster_writer`)."""
    per = settings.ranks // settings.nodes
    plan = Plan(settings.ranks)
    tight = staged["tight"].read_bytes()
    ends = _line_ends(tight)
    held_cuts = [ends[STOP_LINE // 2], ends[STOP_LINE - 1]]  # two pieces, then the hold
    stream_cuts = [ends[len(ends) * k // settings.streaming_pieces - 1] for k in range(1, settings.streaming_pieces)]
    healthy = staged["healthy"].read_bytes()
    files: list[dict[str, Any]] = []
    for rank in range(node * per, (node + 1) * per):
        def put(run: str, src: str, cuts: list[int], start: int = 0, hold: int | None = None,
                host_log: bool = False, rank: int = rank) -> None:
            d = rank_dir(node_root, run, rank)
            files.append({"dst": str(d / "scope_stats" / "scope_stats.jsonl"), "src": str(staged[src]), "cuts": cuts,
                          "start": start, "hold": hold,
                          "host_log": {"src": str(staged["wedge.log"]), "dst": str(d / "host.log")} if host_log
                          else None})

        mid = [len(healthy) // 2]  # cut mid-line: a reader must wait for the newline
        put(HEALTHY, "healthy", mid)
        put(STREAMING, "tight", stream_cuts)
        if rank == plan.failed:
            put(FAILED, "wedge", [], start=2, host_log=True)
        elif rank == plan.wedged:  # listed after the failed rank: it stops a round after that one failed
            put(FAILED, "tight", held_cuts, start=2, hold=2)
        else:
            put(FAILED, "healthy", mid)
        if rank == plan.stalled:
            put(STALLED, "tight", held_cuts, hold=2)
        else:
            put(STALLED, "healthy", mid)
    return {"pace": settings.pace, "files": files}


# -- processes -------------------------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self, cwd: Path) -> Proc:
        with self.log.open("ab") as fh:
            self.popen = subprocess.Popen(self.argv, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def text(self) -> str:
        return f"--- {self.name} ---\n" + self.log.read_text(errors="replace")[-4000:]

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=20)


class Writer:
    """A node's writer process; :meth:`events` are the JSON lines it reported so far."""

    def __init__(self, plan_file: Path, log: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WRITER), str(plan_file)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log.open("ab"), text=True)
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self._events.append(json.loads(line))

    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def resume(self, dst: Path) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"resume {dst}\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=20)


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read()


def poll(what: str, check: Callable[[], T | None], timeout: float, logs: Callable[[], str] = lambda: "") -> T:
    """``check()`` until it returns something truthy; :class:`TimeoutError` naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (OSError, ValueError, KeyError) as err:
            value, last = None, err
        if value:
            return value
        pause.wait(0.25)  # a polling interval, not a synchronisation
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last})\n{logs()}")


class Prometheus:
    """The HTTP API of the harness's Prometheus."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def _api(self, path: str, **params: str) -> Any:
        status, body = http_get(f"{self.base}{path}?{urllib.parse.urlencode(params)}")
        doc = json.loads(body)
        if status != 200 or doc.get("status") != "success":
            raise ValueError(f"{path} {params}: {status} {doc.get('error')}")
        return doc["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        data = self._api("/api/v1/query", **params)
        return list(data["result"]) if data["resultType"] == "vector" else []

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """``expr`` evaluated every ``step`` seconds from ``start`` to ``end``: the series with any value."""
        data = self._api("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")
        return list(data["result"])

    def value(self, expr: str) -> float | None:
        res = self.query(expr)
        return float(res[0]["value"][1]) if len(res) == 1 else None

    def alerts(self) -> list[dict[str, Any]]:
        return list(self._api("/api/v1/alerts")["alerts"])

    def first_evaluation_after(self, group: str, t: float) -> float | None:
        """The time of the rule group ``group``'s first evaluation after ``t`` (Unix seconds), once it happened
        (None before).  Groups are evaluated apart, each at its own offset in its interval: a rule another group
        reads may be an evaluation behind it, so a check of one group's rules at another's moment waits for this."""
        for g in self._api("/api/v1/rules")["groups"]:
            if g["name"] == group:
                day, _, frac = g["lastEvaluation"].rstrip("Z").partition(".")
                last = datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.UTC).timestamp()
                last += float("0." + frac) if frac else 0.0
                if last <= t:
                    return None
                interval = float(g["interval"])
                return last - ((last - t) // interval) * interval  # ticks are a fixed interval apart
        raise KeyError(group)


class Alertmanager:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Alertmanager holds, active, inhibited and silenced alike (API v2)."""
        status, body = http_get(f"{self.base}/api/v2/alerts")
        if status != 200:
            raise ValueError(f"alertmanager /api/v2/alerts: {status}")
        return list(json.loads(body))


# -- the cluster ---------------------------------------------------------------------------------------------------


@dataclass
class Node:
    index: int
    root: Path
    state: Path
    addr: str
    agent: Proc
    writer: Writer | None = None


@dataclass
class Cluster:
    settings: Settings
    tmp: Path
    nodes: list[Node] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    receiver: Receiver | None = None
    prometheus: Prometheus | None = None
    alertmanager: Alertmanager | None = None
    prometheus_proc: Proc | None = None
    am_port: int = 0

    @property
    def plan(self) -> Plan:
        return Plan(self.settings.ranks)

    def logs(self) -> str:
        return "\n".join(p.text() for p in self.procs if p.log.exists())

    def agent_argv(self, node: Node) -> list[str]:
        return [sys.executable, "-m", "ringtrace", "watch", str(node.root), "--metrics-addr", node.addr,
                "--state-dir", str(node.state), "--series-ttl", str(self.settings.series_ttl),
                "--idle-timeout", str(self.settings.idle_timeout), "--log-level", "info"]

    def start_agent(self, node: Node) -> None:
        node.agent.argv = self.agent_argv(node)
        node.agent.start(self.tmp)
        poll(f"agent {node.index} ready", lambda: node.agent.alive() and
             http_get(f"http://{node.addr}/readyz")[0] == 200, 60, node.agent.text)

    def start(self) -> None:
        s = self.settings
        for i in range(s.nodes):
            root = self.tmp / f"node{i}"
            root.mkdir(parents=True)
            addr = f"127.0.0.1:{free_port()}"
            node = Node(i, root, self.tmp / f"state{i}", addr, Proc(f"agent{i}", [], self.tmp / f"agent{i}.log"))
            self.nodes.append(node)
            self.procs.append(node.agent)
            node.agent.argv = self.agent_argv(node)
            node.agent.start(self.tmp)
        for node in self.nodes:
            poll(f"agent {node.index} ready", lambda node=node: node.agent.alive() and  # type: ignore[misc]
                 http_get(f"http://{node.addr}/readyz")[0] == 200, 60, node.agent.text)
        self.receiver = Receiver()
        self._start_alertmanager()
        self._start_prometheus()
        prom = self.prometheus
        assert prom is not None
        poll("every agent scraped", lambda: prom.value('count(up{job="ringtrace"} == 1)') == s.nodes, 60, self.logs)

    def _start_alertmanager(self) -> None:
        exe = shutil.which(ALERTMANAGER_EXE)
        assert exe is not None, ALERTMANAGER_EXE
        cfg = yaml.safe_load(ALERTMANAGER_YML.read_text())
        cfg["receivers"][0]["webhook_configs"][0]["url"] = self.receiver.url if self.receiver else ""
        if self.settings.group_interval:
            cfg["route"]["routes"][0]["group_interval"] = self.settings.group_interval
        path = self.tmp / "alertmanager.yml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        port = free_port()
        proc = Proc("alertmanager", [exe, f"--config.file={path}", f"--storage.path={self.tmp / 'am-data'}",
                                     f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                                     "--log.level=warn"], self.tmp / "alertmanager.log").start(self.tmp)
        self.procs.append(proc)
        self.alertmanager = Alertmanager(port)
        poll("alertmanager ready", lambda: proc.alive() and http_get(f"http://127.0.0.1:{port}/-/ready")[0] == 200,
             60, proc.text)
        self.am_port = port

    def _start_prometheus(self) -> None:
        exe = shutil.which("prometheus")
        assert exe is not None
        cfg = yaml.safe_load(PROMETHEUS_YML.read_text())
        cfg["rule_files"] = [str(PROMETHEUS_YML.parent / f) for f in cfg["rule_files"]]
        cfg["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{self.am_port}"]}]
        job = cfg["scrape_configs"][0]
        job["static_configs"] = [{"targets": [n.addr for n in self.nodes], "labels": {"cluster": "harness"}}]
        path = self.tmp / "prometheus.yml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        port = free_port()
        proc = Proc("prometheus", [exe, f"--config.file={path}", f"--storage.tsdb.path={self.tmp / 'prom-data'}",
                                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    self.tmp / "prometheus.log").start(self.tmp)
        self.procs.append(proc)
        self.prometheus_proc = proc
        self.prometheus = api = Prometheus(port)
        poll("prometheus ready", lambda: proc.alive() and http_get(f"{api.base}/-/ready")[0] == 200, 60, proc.text)

    def write_runs(self) -> None:
        """Start every node's writer (the runs begin)."""
        staged = stage(self.tmp / "staged")
        for node in self.nodes:
            plan_file = self.tmp / f"writer{node.index}.json"
            plan_file.write_text(json.dumps(node_plan(self.settings, node.index, node.root, staged)))
            node.writer = Writer(plan_file, self.tmp / f"writer{node.index}.log")

    def node_of(self, rank: int) -> Node:
        return self.nodes[rank // (self.settings.ranks // self.settings.nodes)]

    def rank_file(self, run: str, rank: int) -> Path:
        return rank_dir(self.node_of(rank).root, run, rank) / "scope_stats" / "scope_stats.jsonl"

    def writer_event(self, run: str, rank: int, event: str) -> dict[str, Any] | None:
        """The writer's report ``event`` ("held", "done", ...) for ``run``'s ``rank``, once it came."""
        writer = self.node_of(rank).writer
        assert writer is not None
        dst = str(self.rank_file(run, rank))
        return next((e for e in writer.events() if e["event"] == event and e.get("dst") == dst), None)

    def resume(self, run: str, rank: int) -> None:
        writer = self.node_of(rank).writer
        assert writer is not None
        writer.resume(self.rank_file(run, rank))

    def stop(self) -> None:
        for node in self.nodes:
            if node.writer is not None:
                node.writer.close()
        for proc in reversed(self.procs):
            proc.stop()
        if self.receiver is not None:
            self.receiver.close()


@contextlib.contextmanager
def running(settings: Settings, tmp: Path) -> Iterator[Cluster]:
    """A started cluster (no runs written yet), stopped at the end."""
    c = Cluster(settings, tmp)
    try:
        c.start()
        yield c
    finally:
        c.stop()

