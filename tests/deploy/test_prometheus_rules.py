"""deploy/prometheus and deploy/grafana checked by promtool: rules parse, every alert is unit-tested
firing and not firing (the run alerts on series made from real runs of the runtime, by the generator the
checked-in tests must be the output of), every dashboard query parses and names metrics the exporter really
exposes."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import yaml
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.config import Thresholds
from ringtrace.gather.oneshot import read_files
from ringtrace.model.records import Advice, HostLog, Labels, RunAdvice, RunFinished, Source
from ringtrace.sinks import FanOut
from ringtrace.sinks.prometheus import PrometheusSink
from ringtrace.sinks.prometheus.server import load_web_config
from ringtrace.sources.paths import find_sources
from tests._support.dashboards import DASHBOARDS, GRAFANA, load, panels, queries, substitute
from tests._support.prometheus import events_of, feed
from tests._support.require import require
from tests._support.samples import FLOW

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULE_FILES = [PROM / "ringtrace-alerts.yml", PROM / "ringtrace-recording.yml"]
UNIT_TESTS = [PROM / "tests" / "alerts_test.yml", PROM / "tests" / "real_runs_test.yml"]
"""The hand-written tests (the exporter alerts, the recording rules) and the generated ones (the run alerts)."""
README_ANCHOR = "https://github.com/ringtrace/ringtrace/blob/main/docs/runbooks.md#alert-"
# Values the dashboards' variables take when Grafana sends the query.
VARIABLES = {"__rate_interval": "5m", "run": "some_run", "rank": ".*", "dispatch": ".*", "instance": ".*"}


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    require(exe is not None, "promtool not installed (Debian package prometheus)")
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def alert_rules(group: str | None = None) -> list[dict[str, Any]]:
    doc = yaml.safe_load((PROM / "ringtrace-alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r and group in (None, g["name"])]


def recording_names() -> set[str]:
    """Recorded names of both rule files (the alerts' file records what its alerts read, before them)."""
    docs = [yaml.safe_load(p.read_text()) for p in RULE_FILES]
    return {r["record"] for doc in docs for g in doc["groups"] for r in g["rules"] if "record" in r}


def exposed_names() -> set[str]:
    """Every sample name the exporter produces for the sample files (and the self metrics)."""
    sink = PrometheusSink(sink_errors=lambda: {"x": 1}, advice=True)  # advice: --metrics-advice
    sink.set_files_watched(1)
    files, _ = find_sources([str(ROOT / "tests" / "fixtures" / "samples")])
    read_files(files, FanOut([sink]), Thresholds())
    # a run with a host log reporting a failure and dropped records, one with advice (recommended and
    # measure-next), one still open
    data = files[0].read_bytes()
    dropped = data.replace(b'"dropped": 0, "total": 1,', b'"dropped": 3, "total": 4,', 1)
    assert dropped != data
    for ev in events_of(FLOW.read_bytes(), Source("/o/scope_stats/scope_stats.jsonl", Labels(run="o")), 1 << 20):
        if not isinstance(ev, RunFinished):
            sink.receive(ev)
    feed(sink, "/h/scope_stats/scope_stats.jsonl", dropped, "h",
         host_log=HostLog("/h/host.log", orch_error_code=2))
    feed(sink, "/a/scope_stats/scope_stats.jsonl", data, "a", advice=RunAdvice(advice=(
        Advice(1, "heap", 1024, None, 1024, 900, 1024, "tight", ""),
        Advice(2, "heap", 1024, None, 1024, None, None, "oversized", "", measure_next=512))))
    names = {s.name for f in text_string_to_metric_families(generate_latest(sink.registry).decode())
             for s in f.samples}
    names.add("ringtrace_parse_errors_total")  # no sample file has a bad line; the family is declared
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (ringtrace's own, recording rules, ``up``)."""
    names = set(re.findall(r"\b(?:[a-z_]+:)?ringtrace_[a-z_]+(?::[a-z0-9_]+)?\b", expr))
    if re.search(r"\bup\{", expr):
        names.add("up")
    return names


# -- rules ----------------------------------------------------------------------------------------


def test_promtool_check_rules() -> None:
    res = promtool("check", "rules", *map(str, RULE_FILES))
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_unit_tests() -> None:
    res = promtool("test", "rules", *map(str, UNIT_TESTS))
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("SUCCESS") == len(UNIT_TESTS)


def _checked(path: Path) -> tuple[set[tuple[str, str]], set[str]]:
    """(alert, severity) tested firing and alerts tested silent in the promtool tests at ``path``."""
    firing: set[tuple[str, str]] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(path.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            if check["exp_alerts"]:
                firing.update((check["alertname"], a["exp_labels"]["severity"]) for a in check["exp_alerts"])
            else:
                silent.add(check["alertname"])
    return firing, silent


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    firing: set[tuple[str, str]] = set()
    silent: set[str] = set()
    for path in UNIT_TESTS:
        f, s = _checked(path)
        firing |= f
        silent |= s
    rules = alert_rules()
    assert {(r["alert"], r["labels"]["severity"]) for r in rules} <= firing
    assert {r["alert"] for r in rules} <= silent


def test_the_run_alerts_are_tested_on_real_runs_only() -> None:
    """The run alerts' promtool tests are the generated ones (series from real runs of the runtime): the
    hand-written file checks none of them, the generated one all of them (and nothing else)."""
    runs = {r["alert"] for r in alert_rules("ringtrace-runs")}
    assert runs == {"RingtraceRunVerdictError", "RingtraceRunVerdictWarning", "RingtraceRingNearCapacityStalled"}
    hand, generated = (_checked(p) for p in UNIT_TESTS)
    assert not ({a for a, _ in hand[0]} | hand[1]) & runs
    assert {a for a, _ in generated[0]} | generated[1] == runs


def test_the_real_run_tests_are_the_generator_output() -> None:
    spec = importlib.util.spec_from_file_location("build_real_runs", PROM / "tests" / "build_real_runs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert UNIT_TESTS[1].read_text() == mod.render(), "run deploy/prometheus/tests/build_real_runs.py"


def test_alerts_carry_severity_summary_description_runbook() -> None:
    rules = alert_rules()
    assert len({r["alert"] for r in rules}) >= 6
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        ann = r["annotations"]
        assert ann["summary"] and ann["description"], r["alert"]
        assert ann["runbook_url"] == README_ANCHOR + r["alert"].lower(), r["alert"]
        if r["alert"] not in ("RingtraceExporterDown", "RingtraceExporterErrors", "RingtraceParseErrors"):
            # one alert per run: its labels are the run's, its annotations name a rank (read by a query)
            assert "$labels.run" in ann["description"] and "Labels.rank" in ann["description"], r["alert"]
            assert "rank" in ann and "keep_firing_for" in r, r["alert"]
            if r["labels"]["severity"] == "critical":
                assert {"node", "ring", "resource", "site", "code", "dashboard", "report", "trace"} <= set(ann)


def test_rules_read_only_metrics_the_exporter_exposes() -> None:
    exposed = exposed_names() | {"up"}
    recorded = recording_names()
    for doc in map(lambda p: yaml.safe_load(p.read_text()), RULE_FILES):
        for g in doc["groups"]:
            for r in g["rules"]:
                unknown = metric_names(r["expr"]) - exposed - recorded
                assert not unknown, f"{r.get('alert') or r.get('record')}: {unknown}"


def test_example_scrape_config(tmp_path: Path) -> None:
    res = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert res.returncode == 0, res.stdout + res.stderr
    cfg = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert [j["job_name"] for j in cfg["scrape_configs"]] == ["ringtrace"]  # what RingtraceExporterDown expects


def test_example_web_config(tmp_path: Path) -> None:
    doc = yaml.safe_load((PROM / "web-config.example.yml").read_text())
    hashed = doc["basic_auth_users"]["prometheus"]
    assert bcrypt.checkpw(b"change-me", hashed.encode())
    doc.pop("tls_server_config")  # its certificate files are the user's
    (tmp_path / "web.yml").write_text(yaml.safe_dump(doc))
    cfg = load_web_config(tmp_path / "web.yml")
    assert set(cfg.users) == {"prometheus"} and cfg.headers


# -- dashboards ---------------------------------------------------------------------------------------


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("build_dashboards", GRAFANA / "build_dashboards.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, expr) for every panel target and every query variable of every dashboard."""
    return [(f"{q.dashboard} {q.where}", q.expr) for q in queries()]


def test_dashboards_are_the_generator_output() -> None:
    gen = _generator()
    assert sorted(p.name for p in DASHBOARDS) == sorted(gen.DASHBOARDS)
    for name, build in gen.DASHBOARDS.items():
        assert (GRAFANA / name).read_text() == gen.render(build), f"run deploy/grafana/build_dashboards.py ({name})"


def test_dashboard_structure() -> None:
    """What the SDK's types leave to the generator: ids, the data source, descriptions, the variables used, the
    failed runs' columns and the drill-down links (the layout is the SDK's)."""
    uids = set()
    for path in DASHBOARDS:
        dash = load(path)
        uids.add(dash["uid"])
        ids = [p["id"] for p in panels(dash)]
        assert sorted(ids) == list(range(1, len(ids) + 1)), path.name
        names = {v["name"] for v in dash["templating"]["list"]}
        assert "datasource" in names
        for p in panels(dash):
            if p["type"] == "row":
                continue
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p["targets"] and p.get("description"), p["title"]
            refs = [t["refId"] for t in p["targets"]]
            assert len(refs) == len(set(refs))
            for t in p["targets"]:
                used = set(re.findall(r"\$(\w+)", t["expr"])) - {"__rate_interval"}
                assert used <= names, (p["title"], used)
    run = load(GRAFANA / "ringtrace-run.json")
    assert {"run", "rank", "dispatch"} <= {v["name"] for v in run["templating"]["list"]}
    for dash in (run, load(GRAFANA / "ringtrace-overview.json")):  # failed runs on both
        failed = [p for p in panels(dash) if p["type"] == "table" and any(
            "ringtrace_run_failed" in t["expr"] for t in p["targets"])]
        assert len(failed) == 1, dash["uid"]
        order = failed[0]["transformations"][0]["options"]["indexByName"]
        assert list(order) == ["run", "rank", "dispatch", "code", "error", "ring"]
    assert len(uids) == len(DASHBOARDS)
    for name in ("ringtrace-overview.json", "ringtrace-cluster.json"):  # drill-down links
        assert f"/d/{run['uid']}/ringtrace-run?var-run=" in (GRAFANA / name).read_text(), name


def test_the_alerts_link_the_run_dashboard() -> None:
    """The run alerts' ``dashboard`` annotation opens the run drill-down with its variables."""
    run = load(GRAFANA / "ringtrace-run.json")
    names = {v["name"] for v in run["templating"]["list"]}
    linked = [r["annotations"]["dashboard"] for r in alert_rules() if "dashboard" in r.get("annotations", {})]
    assert linked
    for url in linked:
        assert f"/d/{run['uid']}/ringtrace-run?" in url, url
        assert set(re.findall(r"var-(\w+)=", url)) <= names and "var-run=" in url, url


def test_every_dashboard_query_parses_with_promtool(tmp_path: Path) -> None:
    queries = dashboard_queries()
    assert len(queries) >= 35  # every panel's targets were found (39 after issue 35)
    rules = [{"record": f"dashboard:query_{i}:check", "expr": substitute(expr, VARIABLES)} for i, (_, expr) in
             enumerate(queries)]
    rule_file = tmp_path / "dashboards.rules.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}, sort_keys=False))
    res = promtool("check", "rules", str(rule_file))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(rules)} rules found" in res.stdout


@pytest.fixture(scope="module")
def exposed() -> set[str]:
    return exposed_names()


@pytest.mark.parametrize(("where", "expr"), dashboard_queries())
def test_dashboard_queries_read_exposed_or_recorded_metrics(where: str, expr: str, exposed: set[str]) -> None:
    unknown = metric_names(expr) - exposed - recording_names() - {"up"}
    assert not unknown, f"{where}: {unknown}"
    assert metric_names(expr), f"{where}: reads no ringtrace metric"


def _documented() -> set[str]:
    """The metric names docs/reference.md's tables list (``{a,b}`` expanded)."""
    text = (ROOT / "docs" / "reference.md").read_text()
    out: set[str] = set()
    for raw in re.findall(r"`(ringtrace_[a-z_{},]+)", text):
        m = re.match(r"(.*_)\{([a-z_,]+)\}([a-z_]*)", raw)  # name alternatives follow an underscore
        if m:
            out |= {m.group(1) + part + m.group(3) for part in m.group(2).split(",")}
        else:
            out.add(raw.split("{", 1)[0])  # a label set follows the name
    return out


def test_every_exposed_metric_is_documented(exposed: set[str]) -> None:
    documented = _documented()
    missing = sorted(n for n in exposed if n.startswith("ringtrace_")
                     and not ({n, re.sub(r"_(total|created)$", "", n)} & documented))
    assert not missing, f"docs/reference.md does not list: {missing}"
