"""Writes ``real_runs_test.yml``: promtool unit tests of the run alerts (``ringtrace-alerts.yml``) whose input
series are what ringtrace's /metrics exposed, scrape by scrape, while it read real runs of the runtime.  Run it
after changing the rules, the exporter's series or the runs (``tests/deploy`` checks the file is its output):

    .venv/bin/python deploy/prometheus/tests/build_real_runs.py

Each scenario feeds one real run (its ``scope_stats.jsonl`` and ``host.log``, from ``tests/fixtures/samples`` or
``tests/fixtures/realruns``: see the READMEs there) through the Prometheus sink as ``watch`` reads a file that a
streaming writer grows: the records of one chunk arrive before each scrape, every 15 s (today's runtime writes
the file at once when the run ends; the format doc says a reader must not assume either).  A writer that streams
cannot know the run's ``total`` before its end, so the metadata line comes without it (every other byte is the
file's) and the reader finishes the run by its idle timeout (``watch --idle-timeout``, 30 s) after the last
record; a run known from its host log alone is finished at once.  The exporter's clock is promtool's (0 at the
first scrape).  Every per-run series the exposition has is written as Prometheus stores it, with the ``job``
and ``instance`` labels a scrape adds: a series that leaves the exposition gets a staleness marker.  The
expected alerts are written here, from the run's verdict.
"""

from __future__ import annotations

import math
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ringtrace import gather
from ringtrace.model.records import Labels, RunFinished, SinkEvent, Source
from ringtrace.sinks.prometheus import RUN_FAMILIES, PrometheusSink
from ringtrace.sources.paths import source_labels
from ringtrace.stages.run import Run, log_only_run

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = HERE / "real_runs_test.yml"
SCRAPE = 15  # seconds between scrapes and rule evaluations
IDLE = 30  # watch --idle-timeout (default)
TARGET = {"job": "ringtrace", "instance": "node1:9464"}
RUNBOOK = "https://github.com/ringtrace/ringtrace/blob/main/docs/runbooks.md#alert-"
RUN_ALERTS = ("RingtraceRunVerdictError", "RingtraceRunVerdictWarning", "RingtraceRingNearCapacityStalled")
NEAR_AND_OPEN = ("(ringtrace_ring_occupancy_ratio >= 0.8) * ignoring(resource, site, depth) group_left(site, depth) "
                 "ringtrace_open_innermost_scope_info")
"""The stalled alert's expression less its stall: a ring near capacity whose run submits to it now."""
_LABELS = {name: ("run", "rank", "dispatch", *extra) for name, _, extra in RUN_FAMILIES}
_PER_RUN = set(_LABELS)


class Fed:
    """What the exporter exposed at each scrape (per-run series only) and the run's end."""

    def __init__(self) -> None:
        self.scrapes: list[dict[tuple[str, frozenset[tuple[str, str]]], float]] = []
        self.fin: RunFinished | None = None
        self.finished_at: int | None = None  # the scrape that first shows the run finished


def _snapshot(sink: PrometheusSink) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for fam in text_string_to_metric_families(generate_latest(sink.registry).decode()):
        for s in fam.samples:
            if s.name in _PER_RUN:
                out[s.name, frozenset(s.labels.items())] = s.value
    return out


def _rel(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


def streamed(path: Path) -> list[bytes]:
    """The lines of the real file ``path`` as a writer that streams would write them: its metadata line without
    ``total`` (the records the device attempted, known only at the run's end), every record as it is."""
    lines = path.read_bytes().splitlines(keepends=True)
    meta = msgspec.json.decode(lines[0])
    meta.pop("total", None)
    return [msgspec.json.encode(meta) + b"\n", *lines[1:]]


def feed(folder: Path, chunks: int, scrapes: int) -> Fed:
    """Feed the one run in ``folder`` to a Prometheus sink as ``watch`` would, and keep what it exposes at each
    of ``scrapes`` scrapes (see the module docstring).  The run's host log is found and matched as ``summary``
    finds it; a folder with a host log and no scope_stats file is a run known from its log alone."""
    now = [0.0]
    sink = PrometheusSink(clock=lambda: now[0], series_ttl=3600.0)
    fed = Fed()

    def take(events: Sequence[SinkEvent]) -> None:
        for ev in events:
            sink.receive(ev)
            if isinstance(ev, RunFinished):
                fed.fin = ev

    planned = gather.plan([str(folder)])
    files, plan = planned.files, planned.plan
    logs = {f: msgspec.structs.replace(log, path=_rel(Path(log.path))) for f, log in plan.for_file.items()}
    parts: list[bytes] = []
    run: Run | None = None
    if not files:  # known from its log alone: finished at once
        [log] = plan.log_only
        take(log_only_run(msgspec.structs.replace(log, path=_rel(Path(log.path)))))
    else:
        [path] = files
        lines = streamed(path)
        per = math.ceil((len(lines) - 1) / chunks)  # records a chunk; the metadata line comes with the first
        parts = [b"".join(lines[(1 if k else 0) + k * per:1 + (k + 1) * per]) for k in range(chunks)]
        run = Run(Source(_rel(path), source_labels(path)), host_log=logs.get(path))
    idle_end = ((len(parts) - 1) * SCRAPE + IDLE) if parts else 0
    for k in range(scrapes):
        now[0] = float(k * SCRAPE)
        if run is not None and k * SCRAPE >= idle_end and fed.fin is None:
            now[0] = float(idle_end)  # the idle timeout after the last record finishes it
            take(run.finish("idle"))
            now[0] = float(k * SCRAPE)
        if run is not None and k < len(parts):
            take(run.feed(parts[k]))
        fed.scrapes.append(_snapshot(sink))
        if fed.fin is not None and fed.finished_at is None:
            fed.finished_at = k
    assert fed.fin is not None, f"{folder}: the run did not finish within {scrapes} scrapes"
    return fed


# -- promtool's input series --------------------------------------------------------------------------------


def _value(v: float) -> str:
    return str(int(v)) if v == int(v) and abs(v) < 1e15 else repr(v)


def _values(seq: list[float | None]) -> str:
    """promtool's notation: ``_`` no sample, ``stale`` the staleness marker of a series that left the
    exposition, ``axN`` a value held N more scrapes, ``_xN`` N scrapes without a sample."""
    tokens: list[str] = []
    prev: float | None = None
    for v in seq:
        tokens.append(("stale" if prev is not None else "_") if v is None else _value(v))
        prev = v
    out: list[str] = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[i]:
            j += 1
        n = j - i
        if tokens[i] == "stale":
            out.append("stale")
            i += 1
            continue
        if tokens[i] == "_":
            out.append("_" if n == 0 else f"_x{n + 1}")
        else:
            out.append(tokens[i] if n == 0 else f"{tokens[i]}x{n}")
        i = j + 1
    return " ".join(out)


def _selector(name: str, labels: frozenset[tuple[str, str]]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    given = dict(labels)
    lab = {**TARGET, **{k: given[k] for k in _LABELS[name] if given[k] != ""}}  # an empty label is no label
    return name + "{" + ",".join(f'{k}="{esc(v)}"' for k, v in lab.items()) + "}"


def input_series(fed: Fed) -> list[dict[str, str]]:
    keys: dict[tuple[str, frozenset[tuple[str, str]]], None] = {}
    for snap in fed.scrapes:
        keys.update(dict.fromkeys(snap))
    order = {name: i for i, name in enumerate(n for n, _, _ in RUN_FAMILIES)}
    out = []
    for key in sorted(keys, key=lambda k: (order[k[0]], sorted(k[1]))):
        out.append({"series": _selector(*key), "values": _values([snap.get(key) for snap in fed.scrapes])})
    return out


# -- expected alerts ---------------------------------------------------------------------------------------


def _at(fed: Fed, k: int, name: str) -> list[dict[str, str]]:
    """The label sets of ``name``'s series at scrape ``k``."""
    return [dict(lab) for (n, lab) in fed.scrapes[k] if n == name]


def _links(run: str, rank: str, dispatch: str) -> dict[str, str]:
    """The annotations' links, as the templates write them (``urlquery``; the agent's address, ``instance``)."""
    q = urllib.parse.quote_plus
    agent = TARGET["instance"]
    path = f"{q(run)}/{q(rank)}/{q(dispatch)}"
    return {"dashboard": f"https://grafana.example.com/d/ringtrace-run/ringtrace-run?var-run={q(run)}&var-rank={q(rank)}",
            "report": f"http://{agent}/report/{path}",
            "trace": f"https://ui.perfetto.dev/#!/?url=http://{agent}/trace/{path}"}


def _rank(lab: Labels) -> str:
    return f" rank {lab.rank}" if lab.rank else ""


def _where(lab: Labels) -> str:
    return (f" rank {lab.rank}" if lab.rank else "") + (f" dispatch {lab.dispatch}" if lab.dispatch else "")


def verdict_alert(fin: RunFinished, fed: Fed, k: int) -> tuple[str, dict[str, Any]]:
    """The verdict alert a finished run (one rank) raises at scrape ``k``: its name and its promtool expectation."""
    v, lab = fin.verdict, fin.source.labels
    inst = TARGET["instance"]
    if v.severity != "error":
        name = "RingtraceRunVerdictWarning"
        return name, {"exp_labels": {"severity": "warning", "run": lab.run}, "exp_annotations": {
            "summary": f"Run {lab.run}: 1 rank(s) finished with a warning",
            "description": f"1 rank(s) of run {lab.run} finished with a warning. One:{_where(lab)} on {inst}: "
                           f"{v.text}. It did not fail; `ringtrace advise` on the program's runs sizes the ring.",
            "rank": lab.rank, "runbook_url": RUNBOOK + name.lower()}}
    name = "RingtraceRunVerdictError"
    ann: dict[str, str] = {"description": f"1 rank(s) of run {lab.run} failed (verdict error). `ringtrace summary` on "
                                          "the rank's folder gives the evidence.",
                           "runbook_url": RUNBOOK + name.lower()}
    if _at(fed, k, "ringtrace_run_last_record_timestamp_seconds"):  # the first failed rank is known
        failed = _at(fed, k, "ringtrace_run_failed")
        wedged = _at(fed, k, "ringtrace_wedged_innermost_scope_info")
        ring = wedged[0]["ring"] if wedged else failed[0]["ring"] if failed else ""
        ratios = [(v_, dict(lab_)["resource"]) for (n, lab_), v_ in fed.scrapes[k].items()
                  if n == "ringtrace_ring_high_water_ratio" and dict(lab_)["ring"] == ring]
        ann |= {
            "summary": f"Run {lab.run} failed:{_rank(lab)} {v.kind}"
                       + (f" ({failed[0]['error']})" if failed else ""),
            "description": f"1 rank(s) of run {lab.run} failed (verdict error). The first:{_where(lab)} on {inst}: "
                           f"{v.text}. `ringtrace summary` on the rank's folder gives the evidence.",
            "rank": lab.rank, "dispatch": lab.dispatch, "node": inst, "kind": v.kind, "ring": ring,
            "resource": max(ratios)[1] if ratios else "", "site": wedged[0]["site"] if wedged else "",
            "code": f"{failed[0]['code']} {failed[0]['error']}" if failed else "",
            **_links(lab.run, lab.rank, lab.dispatch)}
    return name, {"exp_labels": {"severity": "critical", "run": lab.run}, "exp_annotations": ann}


def _percent(x: float) -> str:
    """Prometheus's humanizePercentage: the ratio times 100 to four significant digits and a %."""
    return f"{x * 100:.4g}%"


def stalled_alert(fin: RunFinished, resource: str, ratio: float) -> dict[str, Any]:
    """The stalled alert for the innermost scope the run wedged in (the one open when it stopped)."""
    lab, w = fin.source.labels, fin.summary.wedged[-1]
    inst = TARGET["instance"]
    pct = _percent(ratio)
    return {
        "exp_labels": {"severity": "critical", "run": lab.run},
        "exp_annotations": {
            "summary": f"Run {lab.run}{_rank(lab)} stopped with ring "
                       f"{w.ring} {resource} at {pct}",
            "description": f"1 rank(s) of run {lab.run} have read no new record for 10 s or more while their innermost "
                           f"open scope submits to a ring 80% or more full. The fullest:{_where(lab)} on {inst}: scope "
                           f"{w.site} at depth {w.depth} submits to ring {w.ring}, whose {resource} is {pct} full: the "
                           "run is about to wedge there. When the idle timeout finishes it, its verdict says why "
                           "(RingtraceRunVerdictError).",
            "rank": lab.rank, "dispatch": lab.dispatch, "node": inst, "ring": str(w.ring), "resource": resource,
            "site": w.site, "code": "none yet (the rank is still open; the runtime latches one if it deadlocks)",
            **_links(lab.run, lab.rank, lab.dispatch),
            "runbook_url": RUNBOOK + "ringtraceringnearcapacitystalled"}}


def expect(at: int, alerts: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """promtool checks at scrape ``at``: the run alerts in ``alerts`` fire as given, the others are silent."""
    return [{"eval_time": f"{at * SCRAPE}s", "alertname": name, "exp_alerts": alerts.get(name, [])}
            for name in RUN_ALERTS]


# -- the scenarios ---------------------------------------------------------------------------------------------

SAMPLES = ROOT / "tests" / "fixtures" / "samples"
REALRUNS = ROOT / "tests" / "fixtures" / "realruns"


def wedged_near_capacity() -> dict[str, Any]:
    """The runtime's own deadlock with task window 4 on every ring: its five begins arrive one a scrape; the
    last fills ring 3's window (3 tasks: all a window of 4 holds) and no record follows."""
    fed = feed(SAMPLES / "failed" / "NestedScopes_window4_flow_control_deadlock", chunks=5, scrapes=11)
    fin = fed.fin
    assert fin is not None and fin.verdict.kind == "wedged" and fed.finished_at == 6, fin
    name, verdict = verdict_alert(fin, fed, 6)
    stalled = [stalled_alert(fin, "task_window", 1.0)]
    return _test("a run that wedged with its ring full: stalled first, then the verdict (samples/failed/"
                 "NestedScopes_window4_flow_control_deadlock, streamed one record a scrape)", fed, [
                     *expect(3, {}),  # ring 3 still empty
                     *expect(4, {}),  # the last record: full, but it just came
                     *expect(5, {"RingtraceRingNearCapacityStalled": stalled}),
                     # the idle timeout finished it: the verdict fires; the stall is kept 1 min (keep_firing_for)
                     *expect(6, {name: [verdict], "RingtraceRingNearCapacityStalled": stalled}),
                     *expect(8, {name: [verdict], "RingtraceRingNearCapacityStalled": stalled}),
                     *expect(10, {name: [verdict]})])


def streaming_near_capacity() -> dict[str, Any]:
    """Ring 1's task window at 8 (the program's smallest is 7): the ring reclaims while its scopes run; at the
    scope that begins on line 9 six tasks are live (6 of 7 slots) while records keep coming: no alert, and the
    run completes healthy."""
    fed = feed(REALRUNS / "mixed1_task_window_r1_8_3", chunks=10, scrapes=14)
    fin = fed.fin
    assert fin is not None and fin.verdict.kind == "healthy" and fed.finished_at == 11, fin
    near = near_and_open(fed)
    assert [k for k, _ in near] == [7], near  # line 9's scope: the one scrape it holds at
    k, labels = near[0]
    want = {"labels": "{" + ",".join(f'{n}="{v}"' for n, v in sorted({**TARGET, **labels}.items())) + "}",
            "value": 6 / 7}
    test = _test("a ring that streams near capacity: nothing fires (realruns/mixed1_task_window_r1_8_3, streamed "
                 "one record a scrape)", fed, [x for k in range(14) for x in expect(k, {})])
    test["promql_expr_test"] = [{"expr": NEAR_AND_OPEN, "eval_time": f"{k * SCRAPE}s", "exp_samples": [want]}]
    return test


def near_and_open(fed: Fed) -> list[tuple[int, dict[str, str]]]:
    """The scrapes at which a ring was near capacity (occupancy >= 0.8) while the run's innermost open scope
    submitted to it, and the labels of :data:`NEAR_AND_OPEN`'s sample then (the stalled alert, less the stall)."""
    out = []
    for k, snap in enumerate(fed.scrapes):
        opened = [dict(lab) for (name, lab) in snap if name == "ringtrace_open_innermost_scope_info"]
        for (name, lab), v in snap.items():
            occ = dict(lab)
            if name == "ringtrace_ring_occupancy_ratio" and v >= 0.8:
                out += [(k, {**{n: x for n, x in occ.items() if x and n != "resource"}, "resource": occ["resource"],
                             "site": o["site"], "depth": o["depth"]}) for o in opened if o["ring"] == occ["ring"]]
    return out


def verdict_fires(title: str, folder: Path, chunks: int, kind: str, finished_at: int) -> dict[str, Any]:
    """A run whose one alert is its verdict's: silent before the idle timeout finished it, firing from then on
    (checked the scrape before, at the finish and two scrapes later)."""
    fed = feed(folder, chunks, finished_at + 3)
    fin = fed.fin
    assert fin is not None and fin.verdict.kind == kind and fed.finished_at == finished_at, fin
    name, verdict = verdict_alert(fin, fed, finished_at)
    before = expect(finished_at - 1, {}) if finished_at else []
    return _test(title, fed, [*before, *expect(finished_at, {name: [verdict]}),
                              *expect(finished_at + 2, {name: [verdict]})])


VERDICT_ONLY = (
    # heap 1 KiB per ring: the first task asks more than the whole ring, so the ring is empty when the run
    # stops: not near capacity, never stalled near it; the verdict names the deadlock (host log: code 2)
    ("a run that wedged on an empty ring: only the verdict (samples/failed/HeapRingDeadlock)",
     SAMPLES / "failed" / "HeapRingDeadlock", 1, "wedged", 2),
    # a long chain at depth 0 with ring 0's task window at 8: completed, with a proven need of 7 of 8
    ("a run that completed near capacity: a warning (realruns/longdummy_task_window_r0_8_3)",
     REALRUNS / "longdummy_task_window_r0_8_3", 2, "near_capacity", 3),
    # completed, and its golden comparison failed: an error, and not a ring problem
    ("a run whose test failed on numbers (realruns/bpa_small1_task_window_r2_8_3)",
     REALRUNS / "bpa_small1_task_window_r2_8_3", 3, "test_failed", 4),
    # ring 1's task window at 4: SCOPE_DEADLOCK; the simulator wrote no file, the host log tells
    ("a run known from its host log alone (realruns/mixed1_task_window_r1_4_2)",
     REALRUNS / "mixed1_task_window_r1_4_2", 1, "failed", 0),
)


def scenarios() -> list[dict[str, Any]]:
    return [wedged_near_capacity(), streaming_near_capacity(), *(verdict_fires(*args) for args in VERDICT_ONLY)]


def _test(name: str, fed: Fed, checks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "interval": f"{SCRAPE}s", "input_series": input_series(fed), "alert_rule_test": checks}


HEADER = """\
# Generated by deploy/prometheus/tests/build_real_runs.py: do not edit (run it; tests/deploy checks the file
# is its output).  promtool test rules deploy/prometheus/tests/real_runs_test.yml
# The input series are what ringtrace's /metrics exposed, scrape by scrape (every 15 s), while it read real
# runs of the runtime (tests/fixtures/samples/failed, tests/fixtures/realruns), a chunk of records before each
# scrape; the scenario's name says which run.  The run alerts are checked at the scrapes named, each firing
# as written or silent.
"""


def render() -> str:
    doc = {"rule_files": ["../ringtrace-alerts.yml", "../ringtrace-recording.yml"],
           "evaluation_interval": f"{SCRAPE}s", "tests": scenarios()}
    return HEADER + yaml.dump(doc, Dumper=_NoAliases, sort_keys=False, width=1 << 16, allow_unicode=True)


class _NoAliases(yaml.SafeDumper):
    """Writes a repeated expectation out again instead of as an anchor and alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def main() -> int:
    OUT.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
