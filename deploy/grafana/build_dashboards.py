"""Writes the two Grafana dashboards in this folder (run it after editing; a test checks they match).

    python deploy/grafana/build_dashboards.py

* ``ringtrace-overview.json``: the cluster: each finished run's verdict (``ringtrace_run_verdict``),
  runs x rings proven need and occupancy, rings stalled near capacity, failed and wedged runs, the
  exporters themselves.
* ``ringtrace-run.json``: one run drill-down (``run`` and ``rank`` variables): its verdict per rank,
  per rank, ring and resource the proven need, occupancy (open runs), high water, capacities, where it wedged.

Every query uses the ``datasource`` variable; only ``$run``, ``$rank``, ``$instance`` and
``$__rate_interval`` appear in expressions (the test substitutes them and has promtool parse
every expression as a recording rule).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
OVERVIEW_UID = "ringtrace-overview"
RUN_UID = "ringtrace-run"
RUN_SEL = 'run=~"$run", rank=~"$rank", dispatch=~"$dispatch"'
PER_RING = "rank {{rank}} d{{dispatch}} ring {{ring}} {{resource}}"
HIGH_WATER = ("The largest scope high water (end.head - begin.tail) over what the ring can hold, for the rings and "
              "resources the run used. Occupancy, not need: a ring that never had to wait keeps everything; above "
              "100% the ring reclaimed during the scope.")


class Layout:
    """Places panels left to right in a 24-column grid and numbers them."""

    def __init__(self) -> None:
        self.x = self.y = self.row_h = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def add(self, panel: dict[str, Any], w: int, h: int) -> None:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        panel = {"id": self.next_id, "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h}, **panel}
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        self.panels.append(panel)

    def row(self, title: str) -> None:
        self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.add({"type": "row", "title": title, "collapsed": False, "panels": []}, 24, 1)
        self.x, self.y, self.row_h = 0, self.y + 1, 0


def target(expr: str, ref: str = "A", legend: str = "", instant: bool = False, table: bool = False
           ) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": DS, "refId": ref, "expr": expr, "range": not instant, "instant": instant}
    if legend:
        t["legendFormat"] = legend
    if table:
        t["format"] = "table"
    return t


def thresholds(*steps: tuple[float | None, str]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"value": v, "color": c} for v, c in steps]}


RATIO_STEPS = thresholds((None, "green"), (0.8, "orange"), (0.95, "red"))
STALLED = ('(ringtrace_ring_occupancy_ratio{{{sel}}} >= 0.8) * ignoring(resource, site, depth) group_left(site, depth) '
           'ringtrace_open_innermost_scope_info and ignoring(ring, resource, site, depth) '
           '(timestamp(ringtrace_run_last_record_timestamp_seconds) - ringtrace_run_last_record_timestamp_seconds '
           '>= 10)')
"""The expression of the alert RingtraceRingNearCapacityStalled, for a selector ``sel``."""
SEVERITY_COLOURS = [{"type": "value", "options": {
    "ok": {"color": "green", "index": 0}, "info": {"color": "blue", "index": 1},
    "warning": {"color": "orange", "index": 2}, "error": {"color": "red", "index": 3}}}]


def stat(title: str, expr: str, desc: str, steps: dict[str, Any] | None = None, unit: str = "none",
         link: str = "") -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "thresholds": steps or thresholds((None, "green")),
                                "color": {"mode": "thresholds"}}
    if link:
        defaults["links"] = [{"title": "open", "url": link}]
    return {"type": "stat", "title": title, "description": desc, "datasource": DS,
            "targets": [target(expr, instant=True)],
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "background", "graphMode": "none", "textMode": "value"},
            "fieldConfig": {"defaults": defaults, "overrides": []}}


def timeseries(title: str, targets: list[dict[str, Any]], desc: str, unit: str = "none",
               steps: dict[str, Any] | None = None) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "custom": {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 0,
                                                         "showPoints": "never", "spanNulls": False}}
    if steps:
        defaults["thresholds"] = steps
        defaults["custom"]["thresholdsStyle"] = {"mode": "line"}
    return {"type": "timeseries", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}},
            "fieldConfig": {"defaults": defaults, "overrides": []}}


def table(title: str, targets: list[dict[str, Any]], desc: str, transformations: list[dict[str, Any]],
          unit: str = "none", steps: dict[str, Any] | None = None, cell: str = "auto",
          overrides: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": unit, "custom": {"align": "auto", "cellOptions": {"type": cell}}}
    if steps:
        defaults["thresholds"] = steps
        defaults["color"] = {"mode": "thresholds"}
    return {"type": "table", "title": title, "description": desc, "datasource": DS, "targets": targets,
            "transformations": transformations, "options": {"showHeader": True, "cellHeight": "sm"},
            "fieldConfig": {"defaults": defaults, "overrides": overrides or []}}


def bargauge(title: str, expr: str, legend: str, desc: str, unit: str = "percentunit") -> dict[str, Any]:
    return {"type": "bargauge", "title": title, "description": desc, "datasource": DS,
            "targets": [target(expr, legend=legend, instant=True)],
            "options": {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True,
                        "valueMode": "color", "namePlacement": "left", "sizing": "auto",
                        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
            "fieldConfig": {"defaults": {"unit": unit, "min": 0, "max": 1, "thresholds": RATIO_STEPS,
                                         "color": {"mode": "thresholds"}}, "overrides": []}}


def run_links(url: str) -> dict[str, Any]:
    """A table override: the ``run`` column links to the run's drill-down page at ``url``."""
    return {"matcher": {"id": "byName", "options": "run"}, "properties": [
        {"id": "links", "value": [{"title": "Run drill-down", "url": url}]}]}


def hide(*names: str) -> dict[str, Any]:
    return {"id": "organize", "options": {"excludeByName": dict.fromkeys(names, True), "renameByName": {}}}


def ds_var() -> dict[str, Any]:
    return {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": []}


def query_var(name: str, query: str, label: str, multi: bool = True) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2, "sort": 1,
            "multi": multi, "includeAll": multi, "allValue": ".*" if multi else None, "current": {},
            "hide": 0, "regex": "", "options": []}


def dashboard(uid: str, title: str, desc: str, panels: list[dict[str, Any]], variables: list[dict[str, Any]],
              links: list[dict[str, Any]]) -> dict[str, Any]:
    return {"uid": uid, "title": title, "description": desc, "tags": ["ringtrace"], "timezone": "",
            "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1, "refresh": "30s",
            "time": {"from": "now-3h", "to": "now"}, "timepicker": {}, "fiscalYearStartMonth": 0,
            "liveNow": False, "annotations": {"list": []}, "links": links, "panels": panels,
            "templating": {"list": variables}}


def failed_table(expr: str, run_link: str | None = None) -> dict[str, Any]:
    """Failed runs as the host log reports them: run, rank, dispatch, code, error, ring."""
    overrides = [] if run_link is None else [run_links(run_link)]
    return table("Failed runs: the host log's code", [target(expr, instant=True, table=True)],
                 "Runs whose host log reports a failure (their verdict is an error: alert RingtraceRunVerdictError): "
                 "the latched code (orch_error_code, else sched_error_code), its name and the ring the deadlock "
                 "report names. A failed run on the runtime's simulator leaves no scope_stats file: it shows here "
                 "and in the verdicts.",
                 [{"id": "organize", "options": {
                     "excludeByName": {"Time": True, "__name__": True, "job": True, "Value": True},
                     "indexByName": {"run": 0, "rank": 1, "dispatch": 2, "code": 3, "error": 4, "ring": 5}}}],
                 overrides=overrides)


def verdict_table(expr: str, run_link: str | None = None) -> dict[str, Any]:
    """Each finished run's one verdict (``ringtrace_run_verdict``): run, rank, dispatch, kind, severity, text."""
    overrides: list[dict[str, Any]] = [{"matcher": {"id": "byName", "options": "severity"}, "properties": [
        {"id": "mappings", "value": SEVERITY_COLOURS},
        {"id": "custom.cellOptions", "value": {"type": "color-background"}}]}]
    if run_link is not None:
        overrides.append(run_links(run_link))
    return table("Verdicts: what each finished run came to", [target(expr, instant=True, table=True)],
                 "The one verdict on each finished run (file: rank x dispatch), as `ringtrace summary`, `check`, the "
                 "OTLP spans and the Perfetto traces say it: failed, wedged, cut_short, test_failed (error: alert "
                 "RingtraceRunVerdictError), no_headroom, near_capacity (a proven need near capacity: warning, "
                 "RingtraceRunVerdictWarning), healthy, unknown. Shown for --series-ttl after the run finished.",
                 [{"id": "organize", "options": {
                     "excludeByName": {"Time": True, "__name__": True, "job": True, "Value": True},
                     "indexByName": {"run": 0, "rank": 1, "dispatch": 2, "kind": 3, "severity": 4, "text": 5}}},
                  {"id": "sortBy", "options": {"sort": [{"field": "severity", "desc": False}]}}],
                 overrides=overrides)


def overview() -> dict[str, Any]:
    lay = Layout()
    run_link = f"/d/{RUN_UID}/ringtrace-run?var-run=${{__data.fields.run}}&${{datasource:queryparam}}"
    lay.row("Runs")
    lay.add(stat("Runs exposed", 'count(count by (run, rank, dispatch) (ringtrace_run_scopes{instance=~"$instance"}))',
                 "Runs (run x rank x dispatch) whose series are exposed: open, or finished less than "
                 "--series-ttl ago."), 4, 4)
    lay.add(stat("Open runs", 'count(ringtrace_run_info{reason="", instance=~"$instance"}) or vector(0)',
                 "Runs still being written or followed."), 4, 4)
    lay.add(stat("Failing runs", 'count(ringtrace_run_verdict{severity="error", instance=~"$instance"}) or vector(0)',
                 "Finished runs (files) whose verdict is an error: failed, wedged, cut short, test failed "
                 "(alert RingtraceRunVerdictError).", thresholds((None, "green"), (1, "red"))), 4, 4)
    lay.add(stat("Runs with a warning",
                 'count(ringtrace_run_verdict{severity="warning", instance=~"$instance"}) or vector(0)',
                 "Finished runs whose verdict is a warning: a proven need at or near capacity, or records dropped "
                 "(alert RingtraceRunVerdictWarning).", thresholds((None, "green"), (1, "orange"))), 4, 4)
    stalled = STALLED.format(sel='instance=~"$instance"')
    lay.add(stat("Rings stalled near capacity", f"count({stalled}) or vector(0)",
                 "Rings of open runs at 80% or more of a resource while the run's innermost open scope submits to "
                 "them and no record came for 10 s: about to wedge (alert RingtraceRingNearCapacityStalled). A ring "
                 "near capacity while records keep coming is the allocator doing its job: not counted.",
                 thresholds((None, "green"), (1, "red"))), 4, 4)
    lay.add(stat("Runs with dropped records",
                 'count(ringtrace_run_dropped_records{instance=~"$instance"} > 0) or vector(0)',
                 "Runs whose collector dropped records: their peaks are lower bounds.",
                 thresholds((None, "green"), (1, "orange"))), 4, 4)

    lay.row("Verdicts")
    lay.add(verdict_table('ringtrace_run_verdict{instance=~"$instance"}', run_link), 24, 9)

    lay.row("Runs x rings")
    pivot = [{"id": "groupingToMatrix", "options": {"columnField": "ring", "rowField": "run",
                                                    "valueField": "Value", "emptyValue": "null"}}]
    link_override = [{"matcher": {"id": "byName", "options": "run\\ring"},
                      "properties": [{"id": "links", "value": [{"title": "Run drill-down", "url":
                                      f"/d/{RUN_UID}/ringtrace-run?var-run=${{__value.raw}}"}]}]}]
    lay.add(table("Proven need / capacity (worst rank and resource)",
                  [target("run_ring:ringtrace_ring_need_ratio:max", instant=True, table=True)],
                  "Rows are runs, columns rings 0-3; each cell the highest share of capacity the records prove the "
                  "run needed (one open scope's tasks held at once, or one task's block; task window and heap), "
                  "over ranks, dispatches and resources. At 100% the run had no headroom.", pivot, "percentunit",
                  RATIO_STEPS, "color-background", link_override), 12, 10)
    lay.add(table("Occupancy / capacity at the latest record (worst rank and resource)",
                  [target("run_ring:ringtrace_ring_occupancy_ratio:max", instant=True, table=True)],
                  "What the ring held at its latest record, as a share of what it can hold. Occupancy, not need: "
                  "the runtime reclaims lazily, so a ring that never had to wait keeps everything and a ring that "
                  "streams sits near capacity doing its job.", pivot, "percentunit", RATIO_STEPS,
                  "color-background", link_override), 12, 10)
    lay.add(timeseries("Occupancy over time (worst rank and resource)",
                       [target("run_ring:ringtrace_ring_occupancy_ratio:max", legend="{{run}} ring {{ring}}")],
                       "One line per run and ring; a line ends when the run's series expire. High while records keep "
                       "coming is streaming; high while the run makes no progress is a wedge coming.", "percentunit",
                       RATIO_STEPS), 24, 8)

    lay.row("Failed runs (host log)")
    lay.add(failed_table('ringtrace_run_failed{instance=~"$instance"} == 1', run_link), 24, 8)

    lay.row("Wedged runs, dropped records")
    lay.add(table("Wedged runs: where they stopped",
                  [target('(ringtrace_wedged_scopes{instance=~"$instance"} > 0) * ignoring(site, depth, ring) '
                          'group_left(site, depth, ring) ringtrace_wedged_innermost_scope_info', instant=True,
                          table=True)],
                  "The innermost scope left open by each wedged run; Value is the number of open scopes.",
                  [hide("Time", "__name__", "job")], overrides=[run_links(run_link)]), 12, 8)
    lay.add(table("Runs with dropped records",
                  [target('ringtrace_run_dropped_records{instance=~"$instance"} > 0', instant=True, table=True)],
                  "Value: records dropped by the collector (the run's peaks are lower bounds). A latched fatal is "
                  "in the run's verdict.", [hide("Time", "__name__", "job")]), 12, 8)

    lay.row("Exporters")
    lay.add(stat("Exporters up", 'sum(up{job="ringtrace", instance=~"$instance"})',
                 "ringtrace processes Prometheus scrapes successfully (alert RingtraceExporterDown)."), 4, 6)
    lay.add(stat("Files watched", 'sum(ringtrace_files_watched{instance=~"$instance"})',
                 "scope_stats files followed right now, over all nodes."), 4, 6)
    lay.add(timeseries("Records read per second", [target("instance:ringtrace_records_read:rate5m",
                                                          legend="{{instance}}")],
                       "Scope-boundary records read, per node.", "ops"), 8, 6)
    lay.add(timeseries("Errors per second", [
        target('sum by (instance, reason) (rate(ringtrace_parse_errors_total{instance=~"$instance"}'
               '[$__rate_interval]))', "A", "parse {{reason}} {{instance}}"),
        target('sum by (instance, sink) (rate(ringtrace_sink_errors_total{instance=~"$instance"}'
               '[$__rate_interval]))', "B", "sink {{sink}} {{instance}}")],
        "Unreadable input lines by reason, and failing outputs by sink.", "ops"), 8, 6)
    variables = [ds_var(), query_var("instance", "label_values(ringtrace_build_info, instance)", "Node")]
    links = [{"title": "Run drill-down", "type": "link", "url": f"/d/{RUN_UID}/ringtrace-run", "icon": "dashboard",
              "targetBlank": False, "keepTime": True, "includeVars": False, "asDropdown": False, "tags": []}]
    return dashboard(OVERVIEW_UID, "ringtrace / cluster overview",
                     "Each run's verdict, proven need and occupancy, rings about to wedge, failed and wedged runs "
                     "over every node running ringtrace.", lay.panels,
                     variables, links)


def run_dashboard() -> dict[str, Any]:
    lay = Layout()
    lay.row("Run")
    for title, expr, desc, steps in (
        ("Ranks x dispatches", f"count(ringtrace_run_scopes{{{RUN_SEL}}})", "Files of the run shown.", None),
        ("Scopes", f"sum(ringtrace_run_scopes{{{RUN_SEL}}})", "Paired scopes read so far.", None),
        ("Records", f"sum(ringtrace_run_records{{{RUN_SEL}}})", "Boundary records read so far.", None),
        ("Cut-short files", f'count(ringtrace_run_verdict{{kind="cut_short", {RUN_SEL}}}) or vector(0)',
         "Finished files whose records fall short of the metadata's total less dropped (verdict cut short).",
         thresholds((None, "green"), (1, "orange"))),
        ("Wedged scopes", f"sum(ringtrace_wedged_scopes{{{RUN_SEL}}})", "Scopes never closed (finished runs).",
         thresholds((None, "green"), (1, "red"))),
        ("Dropped records", f"sum(ringtrace_run_dropped_records{{{RUN_SEL}}}) or vector(0)",
         "Dropped by the collector.",
         thresholds((None, "green"), (1, "orange"))),
    ):
        lay.add(stat(title, expr, desc, steps), 4, 4)

    lay.add(verdict_table(f"ringtrace_run_verdict{{{RUN_SEL}}}"), 24, 5)
    lay.add(failed_table(f"ringtrace_run_failed{{{RUN_SEL}}} == 1"), 24, 5)

    lay.row("Need and occupancy per rank, ring and resource")
    lay.add(bargauge("Proven need / capacity",
                     f"ringtrace_ring_need_ratio{{{RUN_SEL}}}", "rank {{rank}} d{{dispatch}} ring {{ring}} "
                     "{{resource}}", "The need the records prove (one open scope's tasks held at once, or one task's "
                     "block) over capacity; task window and heap only (the dep pool's count is timing). At 100% "
                     "the run had no headroom."), 12, 12)
    lay.add(bargauge("Occupancy / capacity at the latest record",
                     f"ringtrace_ring_occupancy_ratio{{{RUN_SEL}}}", "rank {{rank}} d{{dispatch}} ring {{ring}} "
                     "{{resource}}", "What the ring held at its latest record over what it can hold (a task window "
                     "of N holds N - 1). Occupancy, not need: near 100% while records keep coming the ring streams; "
                     "in a run that stopped it is about to wedge."), 12, 12)

    lay.row("High water and capacities")
    high_water = "ringtrace_ring_high_water_ratio{" + RUN_SEL + "}"
    lay.add(bargauge("Largest scope high water / usable capacity", high_water, PER_RING, HIGH_WATER), 12, 10)
    lay.add(table("Capacities per rank (the file's metadata line)",
                  [target(f"ringtrace_run_sizes_info{{{RUN_SEL}}}", instant=True, table=True)],
                  "Per resource the four rings' capacities (rings 0-3, heap in bytes) and the tensormap's entries.",
                  [hide("Time", "__name__", "job", "instance", "Value")]), 12, 10)

    lay.row("Sizing: recommended (ringtrace advise; with watch --metrics-advice)")
    lay.add(table("Recommended capacity",
                  [target(f"ringtrace_ring_recommended_capacity{{{RUN_SEL}}}", "A", instant=True, table=True),
                   target(f"ringtrace_ring_measure_next_capacity{{{RUN_SEL}}}", "B", instant=True, table=True)],
                  "Per rank, ring and resource (heap in bytes), when the agent runs with --metrics-advice: "
                  "recommended = what `ringtrace advise` sizes from a finished run (with headroom, rounded as the "
                  "runtime accepts); measure next = the capacity for the next measurement run where the records "
                  "cannot size the ring yet (oversized or wedged runs). The configured sizes are in the table "
                  "above; `ringtrace advise` on the program's runs says the same without the flag.",
                  [{"id": "merge", "options": {}},
                   {"id": "organize", "options": {
                       "excludeByName": {"Time": True, "__name__": True, "job": True, "instance": True},
                       "renameByName": {"Value #A": "recommended", "Value #B": "measure next"}}}]), 24, 8)

    lay.row("Wedged scopes, files")
    lay.add(table("Where each rank wedged",
                  [target(f"(ringtrace_wedged_scopes{{{RUN_SEL}}} > 0) * ignoring(site, depth, ring) "
                          f"group_left(site, depth, ring) ringtrace_wedged_innermost_scope_info{{{RUN_SEL}}}",
                          instant=True, table=True)],
                  "The innermost scope a finished run left open (where it stopped); Value: the scopes left open. "
                  "The events file and `ringtrace summary` list them all.",
                  [hide("Time", "__name__", "job")]), 24, 8)
    lay.add(table("Files", [target(f"ringtrace_run_info{{{RUN_SEL}}}", "A", instant=True, table=True),
                            target(f"time() - ringtrace_run_last_record_timestamp_seconds{{{RUN_SEL}}}", "B",
                                   instant=True, table=True)],
                  "Path, program, schema version and finish reason (empty while open) per file; Value #B: seconds "
                  "since ringtrace last read a new record of it.",
                  [{"id": "merge", "options": {}}, hide("Time", "__name__", "job", "Value #A")], "s"), 24, 6)
    variables = [ds_var(), query_var("run", "label_values(ringtrace_run_scopes, run)", "Run", multi=False),
                 query_var("rank", 'label_values(ringtrace_run_scopes{run=~"$run"}, rank)', "Rank"),
                 query_var("dispatch", 'label_values(ringtrace_run_scopes{run=~"$run", rank=~"$rank"}, dispatch)',
                           "Dispatch")]
    links = [{"title": "Cluster overview", "type": "link", "url": f"/d/{OVERVIEW_UID}/ringtrace-overview",
              "icon": "dashboard", "targetBlank": False, "keepTime": True, "includeVars": False,
              "asDropdown": False, "tags": []}]
    return dashboard(RUN_UID, "ringtrace / run", "One run's verdict, and per rank, ring and resource its proven "
                     "need, occupancy and capacities.",
                     lay.panels, variables, links)


DASHBOARDS = {"ringtrace-overview.json": overview, "ringtrace-run.json": run_dashboard}


def render(build: Any) -> str:
    return json.dumps(build(), indent=2, sort_keys=False) + "\n"


def main() -> int:
    for name, build in DASHBOARDS.items():
        (HERE / name).write_text(render(build), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
