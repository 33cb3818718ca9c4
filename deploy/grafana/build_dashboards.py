"""Writes the Grafana dashboards in this folder with Grafana's builder, grafana-foundation-sdk (a dev dependency,
pinned in pyproject.toml; run it after editing, a test checks the files match):

    .venv/bin/python deploy/grafana/build_dashboards.py

* ``ringtrace-cluster.json``: the runs across the nodes, as the recording rules join their ranks: runs by
  verdict; per run its worst rank per ring and resource, its failed ranks and the rank that failed first, each
  linking to the run's drill-down.
* ``ringtrace-overview.json``: each finished rank's verdict (``ringtrace_run_verdict``), runs x rings proven
  need and occupancy, rings stalled near capacity, failed and wedged runs, the exporters themselves, by node.
* ``ringtrace-run.json``: one run drill-down (``run``, ``rank`` and ``dispatch`` variables; the alerts link it
  with ``var-run`` and ``var-rank``): its verdict per rank, per rank, ring and resource the proven need,
  occupancy (open runs), high water, capacities, where it wedged.

The SDK's typed builders make every panel, query, option and variable (mypy checks them: ``make typecheck``)
and lay the panels out; panels are numbered in the order they are added.  Every query uses the ``datasource``
variable; only ``$run``, ``$rank``, ``$dispatch``, ``$instance`` and ``$__rate_interval`` appear in
expressions (the tests substitute them: promtool parses every expression, and a real Prometheus answers each
one with data, tests/e2e/test_cluster.py and test_prometheus_server.py).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import units
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
DS = cm.DataSourceRef(type_val="prometheus", uid="${datasource}")
CLUSTER_UID, OVERVIEW_UID, RUN_UID = "ringtrace-cluster", "ringtrace-overview", "ringtrace-run"
RUN_URL = f"/d/{RUN_UID}/ringtrace-run"
"""The run drill-down; deploy/prometheus/ringtrace-alerts.yml links it too (``?var-run=...&var-rank=...``)."""
TO_RUN = f"{RUN_URL}?var-run=${{__data.fields.run}}&${{datasource:queryparam}}"
TO_RANK = f"{RUN_URL}?var-run=${{__data.fields.run}}&var-rank=${{__data.fields.rank}}&${{datasource:queryparam}}"
RUN_SEL = 'run=~"$run", rank=~"$rank", dispatch=~"$dispatch"'
PER_RING = "rank {{rank}} d{{dispatch}} ring {{ring}} {{resource}}"
HIGH_WATER = ("The largest scope high water (end.head - begin.tail) over what the ring can hold, for the rings and "
              "resources the run used. Occupancy, not need: a ring that never had to wait keeps everything; above "
              "100% the ring reclaimed during the scope.")
HIDDEN = ("Time", "__name__", "job")
"""Columns a table of instant series hides."""

Panel = stat.Panel | table.Panel | timeseries.Panel | bargauge.Panel
Item = db.Row | Panel


def target(expr: str, ref: str = "A", legend: str = "", instant: bool = False, table: bool = False
           ) -> prom.Dataquery:
    q = prom.Dataquery().datasource(DS).ref_id(ref).expr(expr)
    q = q.instant() if instant else q.range()
    if legend:
        q = q.legend_format(legend)
    return q.format(PromQueryFormat.TABLE) if table else q


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(
        [dm.Threshold(value=v, color=c) for v, c in steps])


GREEN = thresholds((None, "green"))
RATIO_STEPS = thresholds((None, "green"), (0.8, "orange"), (0.95, "red"))
BY_THRESHOLDS = db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS)
STALLED = ('(ringtrace_ring_occupancy_ratio{{{sel}}} >= 0.8) * ignoring(resource, site, depth) group_left(site, depth) '
           'ringtrace_open_innermost_scope_info and ignoring(ring, resource, site, depth) '
           '(timestamp(ringtrace_run_last_record_timestamp_seconds) - ringtrace_run_last_record_timestamp_seconds '
           '>= 10)')
"""The expression of the alert RingtraceRingNearCapacityStalled, for a selector ``sel``."""


def colours(*names: str) -> dm.DynamicConfigValue:
    """A value mapping colouring ``names`` (worst last) green, blue, orange and red in that order."""
    palette = {"ok": "green", "info": "blue", "running": "blue", "warning": "orange", "error": "red"}
    return dm.DynamicConfigValue(id_val="mappings", value=[dm.ValueMap(options={
        name: dm.ValueMappingResult(color=palette[name], index=i) for i, name in enumerate(names)})])


COLOURED = dm.DynamicConfigValue(id_val="custom.cellOptions", value=cm.TableColoredBackgroundCellOptions())


def links(url: str, title: str = "Run drill-down") -> dm.DynamicConfigValue:
    """A table override's property: the column's cells link to ``url``."""
    return dm.DynamicConfigValue(id_val="links", value=[{"title": title, "url": url}])


def organize(hide: tuple[str, ...] = HIDDEN, order: tuple[str, ...] = (), rename: dict[str, str] | None = None
             ) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(id_val="organize", options={
        "excludeByName": dict.fromkeys(hide, True), "indexByName": {name: i for i, name in enumerate(order)},
        "renameByName": rename or {}})


MERGE = dm.DataTransformerConfig(id_val="merge", options={})


def sort_by(field: str, desc: bool = False) -> dm.DataTransformerConfig:
    return dm.DataTransformerConfig(id_val="sortBy", options={"sort": [{"field": field, "desc": desc}]})


def stat_panel(title: str, expr: str, desc: str, steps: db.ThresholdsConfig = GREEN) -> stat.Panel:
    return (stat.Panel().title(title).description(desc).datasource(DS).with_target(target(expr, instant=True))
            .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
            .color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.NONE)
            .text_mode(cm.BigValueTextMode.VALUE).unit(units.NoUnit).thresholds(steps).color_scheme(BY_THRESHOLDS))


def timeseries_panel(title: str, targets: list[prom.Dataquery], desc: str, unit: str = units.NoUnit,
                     steps: db.ThresholdsConfig | None = None) -> timeseries.Panel:
    p = (timeseries.Panel().title(title).description(desc).datasource(DS).targets(list(targets)).unit(unit)
         .draw_style(cm.GraphDrawStyle.LINE).line_width(1).fill_opacity(0).show_points(cm.VisibilityMode.NEVER)
         .span_nulls(False)
         .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE).placement(cm.LegendPlacement.RIGHT)
                 .show_legend(True).calcs(["lastNotNull", "max"]))
         .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING)))
    if steps is not None:
        p = p.thresholds(steps).thresholds_style(cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.LINE))
    return p


def table_panel(title: str, targets: list[prom.Dataquery], desc: str,
                transformations: list[dm.DataTransformerConfig], unit: str = units.NoUnit,
                steps: db.ThresholdsConfig | None = None, coloured: bool = False) -> table.Panel:
    """A table of instant series; ``steps`` colour its values (the cells' background when ``coloured``)."""
    p = (table.Panel().title(title).description(desc).datasource(DS).targets(list(targets))
         .transformations(transformations).show_header(True).cell_height(cm.TableCellHeight.SM).unit(unit))
    if steps is not None:
        p = p.thresholds(steps).color_scheme(BY_THRESHOLDS)
    return p.cell_options(cm.TableColoredBackgroundCellOptions()) if coloured else p


def bargauge_panel(title: str, expr: str, legend: str, desc: str) -> bargauge.Panel:
    return (bargauge.Panel().title(title).description(desc).datasource(DS)
            .with_target(target(expr, legend=legend, instant=True))
            .orientation(cm.VizOrientation.HORIZONTAL).display_mode(cm.BarGaugeDisplayMode.GRADIENT)
            .show_unfilled(True).value_mode(cm.BarGaugeValueMode.COLOR).name_placement(cm.BarGaugeNamePlacement.LEFT)
            .sizing(cm.BarGaugeSizing.AUTO)
            .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
            .unit(units.PercentUnit).min(0).max(1).thresholds(RATIO_STEPS).color_scheme(BY_THRESHOLDS))


def sized(panel: Panel, w: int, h: int) -> Panel:
    return panel.span(w).height(h)


def failed_table(expr: str, run_link: str | None = None) -> table.Panel:
    """Failed runs as the host log reports them: run, rank, dispatch, code, error, ring."""
    p = table_panel("Failed runs: the host log's code", [target(expr, instant=True, table=True)],
                    "Runs whose host log reports a failure (their verdict is an error: alert "
                    "RingtraceRunVerdictError): the latched code (orch_error_code, else sched_error_code), its name "
                    "and the ring the deadlock report names. A failed run on the runtime's simulator leaves no "
                    "scope_stats file: it shows here and in the verdicts.",
                    [organize((*HIDDEN, "Value"), ("run", "rank", "dispatch", "code", "error", "ring"))])
    return p if run_link is None else p.override_by_name("run", [links(run_link)])


def verdict_table(expr: str, run_link: str | None = None) -> table.Panel:
    """Each finished run's one verdict (``ringtrace_run_verdict``): run, rank, dispatch, kind, severity, text."""
    p = table_panel("Verdicts: what each finished run came to", [target(expr, instant=True, table=True)],
                    "The one verdict on each finished run (file: rank x dispatch), as `ringtrace summary`, `check`, "
                    "the OTLP spans and the Perfetto traces say it: failed, wedged, cut_short, test_failed (error: "
                    "alert RingtraceRunVerdictError), no_headroom, near_capacity (a proven need near capacity: "
                    "warning, RingtraceRunVerdictWarning), healthy, unknown. Shown for --series-ttl after the run "
                    "finished.",
                    [organize((*HIDDEN, "Value"), ("run", "rank", "dispatch", "kind", "severity", "text")),
                     sort_by("severity")])
    p = p.override_by_name("severity", [colours("ok", "info", "warning", "error"), COLOURED])
    return p if run_link is None else p.override_by_name("run", [links(run_link)])


def query_var(name: str, query: str, label: str, multi: bool = True) -> db.QueryVariable:
    v = (db.QueryVariable(name).label(label).datasource(DS).query({"query": query, "refId": f"{name}-var"})
         .definition(query).refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC)
         .multi(multi).include_all(multi))
    return v.all_value(".*") if multi else v


def dash_link(title: str, uid: str) -> db.DashboardLink:
    return (db.DashboardLink(title).type(dm.DashboardLinkType.LINK).url(f"/d/{uid}/{uid}").icon("dashboard")
            .keep_time(True).include_vars(False).target_blank(False).as_dropdown(False).tags([]))


def board(uid: str, title: str, desc: str, items: list[Item], variables: list[db.QueryVariable],
          to: list[db.DashboardLink]) -> db.Dashboard:
    """A dashboard of ``items`` laid out by the SDK (rows full width, panels left to right), numbered from 1 in
    order: the ids stay put while panels are only added at the end."""
    d = (db.Dashboard(title).uid(uid).description(desc).tags(["ringtrace"]).timezone("").editable()
         .tooltip(dm.DashboardCursorSync.CROSSHAIR).version(1).refresh("30s").time("now-3h", "now")
         .fiscal_year_start_month(0).live_now(False).links(list(to))
         .with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus")))
    for v in variables:
        d = d.with_variable(v)
    for i, item in enumerate(items, 1):
        d = d.with_row(item.id(i)) if isinstance(item, db.Row) else d.with_panel(item.id(i))
    return d


# -- the runs across the cluster ------------------------------------------------------------------------------


def cluster() -> db.Dashboard:
    """Each run over every node (the recording rules of ringtrace-recording.yml join a run's ranks by ``run``)."""
    sel = 'run=~"$run"'
    per_verdict = (
        ("Runs failing", "error", "A rank's verdict is an error: failed, wedged, cut short, test failed (alert "
         "RingtraceRunVerdictError pages once per run).", thresholds((None, "green"), (1, "red"))),
        ("Runs with a warning", "warning", "No rank failed; a rank's verdict is a warning: a proven need at or near "
         "capacity, or records dropped (alert RingtraceRunVerdictWarning).",
         thresholds((None, "green"), (1, "orange"))),
        ("Runs running", "running", "No rank failed or warned yet, and a rank is still being written (its "
         "innermost open scope is exposed).", thresholds((None, "green"), (1, "blue"))),
        ("Runs ok", "ok", "Every rank finished with an ok or info verdict.", GREEN),
    )
    items: list[Item] = [db.Row("Runs by verdict")]
    items += [sized(stat_panel(title, f'count(run:ringtrace_run_verdict:worst{{verdict="{verdict}", {sel}}}) or '
                                      "vector(0)", desc, steps), 6, 4)
              for title, verdict, desc, steps in per_verdict]
    items.append(sized(table_panel(
        "Runs: verdict and ranks",
        [target(f"run:ringtrace_run_verdict:worst{{{sel}}}", "A", instant=True, table=True),
         target(f"count by (run) (ringtrace_run_scopes{{{sel}}})", "B", instant=True, table=True),
         target(f"run:ringtrace_ranks_failed:count{{{sel}}}", "C", instant=True, table=True),
         target(f"run:ringtrace_ranks_wedged:count{{{sel}}}", "D", instant=True, table=True),
         target(f"run:ringtrace_ranks_stalled:count{{{sel}}}", "E", instant=True, table=True)],
        "One row per run over every node: its verdict (error if a rank's is, else warning, else running while a rank "
        "is open, else ok), its ranks x dispatches exposed, and how many failed (error verdicts), wedged (scopes "
        "left open) and are stalled near capacity now. The run opens its drill-down.",
        [MERGE, organize((*HIDDEN, "Value #A"), ("run", "verdict"), {
            "Value #B": "ranks", "Value #C": "failed", "Value #D": "wedged", "Value #E": "stalled"}),
         sort_by("verdict")])
        .override_by_name("verdict", [colours("ok", "running", "warning", "error"), COLOURED])
        .override_by_name("run", [links(TO_RUN)]), 24, 9))

    items.append(db.Row("Worst rank per ring"))
    items.append(sized(table_panel(
        "Worst rank per ring and resource: high water / usable capacity",
        [target(f"run_ring_resource:ringtrace_ring_high_water_ratio:worst_rank{{{sel}}}", instant=True, table=True)],
        "For each run, ring and resource the rank whose largest scope high water came closest to (or past) what the "
        "ring can hold, on which node. Occupancy, not need: a ring that never had to wait keeps everything; above "
        "100% the ring reclaimed during the scope. The run and the rank open the rank's drill-down.",
        [organize(HIDDEN, ("run", "ring", "resource", "rank", "dispatch", "instance", "Value"),
                  {"Value": "high water"}), sort_by("high water", desc=True)],
        units.PercentUnit, RATIO_STEPS, coloured=True)
        .override_by_name("run", [links(TO_RUN)]).override_by_name("rank", [links(TO_RANK)]), 24, 10))

    def failed_ranks(rule: str) -> prom.Dataquery:
        """``rule``'s ranks with their error verdict; the value: their last record's time in ms."""
        return target(f'1000 * {rule}{{{sel}}} * on(run, rank, dispatch, instance) group_left(kind, text) '
                      f'ringtrace_run_verdict{{severity="error", {sel}}}', instant=True, table=True)

    failed_desc = (" Each with its node, its verdict and the time of its last record (the first rank to fail is "
                   "the failed rank whose last record came first). The rank opens its drill-down.")
    order = ("run", "rank", "dispatch", "instance", "kind", "Value", "text")
    items.append(db.Row("Failed ranks"))
    items.append(sized(table_panel(
        "The rank that failed first",
        [failed_ranks("run:ringtrace_first_failed_rank:last_record_timestamp_seconds")],
        "Per run, the failed rank whose last record came first: where to look first (the alert "
        "RingtraceRunVerdictError names it)." + failed_desc,
        [organize(HIDDEN, order, {"Value": "last record"})], units.DatetimeISO)
        .override_by_name("run", [links(TO_RUN)]).override_by_name("rank", [links(TO_RANK)]), 24, 6))
    items.append(sized(table_panel(
        "Failed ranks",
        [failed_ranks("rank:ringtrace_rank_failed:last_record_timestamp_seconds")],
        "Every rank of a run whose verdict is an error (failed, wedged, cut short, test failed), the first to fail "
        "first." + failed_desc,
        [organize(HIDDEN, order, {"Value": "last record"}), sort_by("last record")], units.DatetimeISO)
        .override_by_name("run", [links(TO_RUN)]).override_by_name("rank", [links(TO_RANK)]), 24, 9))
    return board(CLUSTER_UID, "ringtrace / runs across the cluster",
                 "Each run over every node: runs by verdict, and per run its worst rank per ring, its failed ranks and "
                 "the rank that failed first, with a drill-down to the run.",
                 items, [query_var("run", "label_values(run:ringtrace_run_verdict:worst, run)", "Run")],
                 [dash_link("Overview by node", OVERVIEW_UID), dash_link("Run drill-down", RUN_UID)])


# -- the overview by node -------------------------------------------------------------------------------------


ON_NODE = 'instance=~"$instance"'


def overview() -> db.Dashboard:
    items: list[Item] = [db.Row("Runs")]
    for title, expr, desc, steps in (
        ("Runs exposed", 'count(count by (run, rank, dispatch) (ringtrace_run_scopes{instance=~"$instance"}))',
         "Runs (run x rank x dispatch) whose series are exposed: open, or finished less than --series-ttl ago.",
         GREEN),
        ("Open runs", 'count(ringtrace_run_info{reason="", instance=~"$instance"}) or vector(0)',
         "Runs still being written or followed.", GREEN),
        ("Failing runs", 'count(ringtrace_run_verdict{severity="error", instance=~"$instance"}) or vector(0)',
         "Finished runs (files) whose verdict is an error: failed, wedged, cut short, test failed "
         "(alert RingtraceRunVerdictError).", thresholds((None, "green"), (1, "red"))),
        ("Runs with a warning", 'count(ringtrace_run_verdict{severity="warning", instance=~"$instance"}) or vector(0)',
         "Finished runs whose verdict is a warning: a proven need at or near capacity, or records dropped "
         "(alert RingtraceRunVerdictWarning).", thresholds((None, "green"), (1, "orange"))),
        ("Rings stalled near capacity", f"count({STALLED.format(sel=ON_NODE)}) or vector(0)",
         "Rings of open runs at 80% or more of a resource while the run's innermost open scope submits to "
         "them and no record came for 10 s: about to wedge (alert RingtraceRingNearCapacityStalled). A ring "
         "near capacity while records keep coming is the allocator doing its job: not counted.",
         thresholds((None, "green"), (1, "red"))),
        ("Runs with dropped records", 'count(ringtrace_run_dropped_records{instance=~"$instance"} > 0) or vector(0)',
         "Runs whose collector dropped records: their peaks are lower bounds.",
         thresholds((None, "green"), (1, "orange"))),
    ):
        items.append(sized(stat_panel(title, expr, desc, steps), 4, 4))

    items += [db.Row("Verdicts"), sized(verdict_table('ringtrace_run_verdict{instance=~"$instance"}', TO_RUN), 24, 9)]

    pivot = [dm.DataTransformerConfig(id_val="groupingToMatrix", options={
        "columnField": "ring", "rowField": "run", "valueField": "Value", "emptyValue": "null"})]
    by_run = links(f"{RUN_URL}?var-run=${{__value.raw}}")
    items.append(db.Row("Runs x rings"))
    items.append(sized(table_panel(
        "Proven need / capacity (worst rank and resource)",
        [target("run_ring:ringtrace_ring_need_ratio:max", instant=True, table=True)],
        "Rows are runs, columns rings 0-3; each cell the highest share of capacity the records prove the "
        "run needed (one open scope's tasks held at once, or one task's block; task window and heap), "
        "over ranks, dispatches and resources. At 100% the run had no headroom.", pivot, units.PercentUnit,
        RATIO_STEPS, coloured=True).override_by_name("run\\ring", [by_run]), 12, 10))
    items.append(sized(table_panel(
        "Occupancy / capacity at the latest record (worst rank and resource)",
        [target("run_ring:ringtrace_ring_occupancy_ratio:max", instant=True, table=True)],
        "What the ring held at its latest record, as a share of what it can hold. Occupancy, not need: "
        "the runtime reclaims lazily, so a ring that never had to wait keeps everything and a ring that "
        "streams sits near capacity doing its job.", pivot, units.PercentUnit, RATIO_STEPS, coloured=True)
        .override_by_name("run\\ring", [by_run]), 12, 10))
    items.append(sized(timeseries_panel(
        "Occupancy over time (worst rank and resource)",
        [target("run_ring:ringtrace_ring_occupancy_ratio:max", legend="{{run}} ring {{ring}}")],
        "One line per run and ring; a line ends when the run's series expire. High while records keep "
        "coming is streaming; high while the run makes no progress is a wedge coming.", units.PercentUnit,
        RATIO_STEPS), 24, 8))

    items += [db.Row("Failed runs (host log)"),
              sized(failed_table('ringtrace_run_failed{instance=~"$instance"} == 1', TO_RUN), 24, 8)]

    items.append(db.Row("Wedged runs, dropped records"))
    items.append(sized(table_panel(
        "Wedged runs: where they stopped",
        [target('(ringtrace_wedged_scopes{instance=~"$instance"} > 0) * ignoring(site, depth, ring) '
                'group_left(site, depth, ring) ringtrace_wedged_innermost_scope_info', instant=True, table=True)],
        "The innermost scope left open by each wedged run; Value is the number of open scopes.",
        [organize()]).override_by_name("run", [links(TO_RUN)]), 12, 8))
    items.append(sized(table_panel(
        "Runs with dropped records",
        [target('ringtrace_run_dropped_records{instance=~"$instance"} > 0', instant=True, table=True)],
        "Value: records dropped by the collector (the run's peaks are lower bounds). A latched fatal is "
        "in the run's verdict.", [organize()]), 12, 8))

    items.append(db.Row("Exporters"))
    items.append(sized(stat_panel("Exporters up", 'sum(up{job="ringtrace", instance=~"$instance"})',
                                  "ringtrace processes Prometheus scrapes successfully (alert RingtraceExporterDown)."),
                       4, 6))
    items.append(sized(stat_panel("Files watched", 'sum(ringtrace_files_watched{instance=~"$instance"})',
                                  "scope_stats files followed right now, over all nodes."), 4, 6))
    items.append(sized(timeseries_panel("Records read per second", [target("instance:ringtrace_records_read:rate5m",
                                                                           legend="{{instance}}")],
                                        "Scope-boundary records read, per node.", "ops"), 8, 6))
    items.append(sized(timeseries_panel("Errors per second", [
        target('sum by (instance, reason) (rate(ringtrace_parse_errors_total{instance=~"$instance"}'
               '[$__rate_interval]))', "A", "parse {{reason}} {{instance}}"),
        target('sum by (instance, sink) (rate(ringtrace_sink_errors_total{instance=~"$instance"}'
               '[$__rate_interval]))', "B", "sink {{sink}} {{instance}}")],
        "Unreadable input lines by reason, and failing outputs by sink.", units.OpsPerSecond), 8, 6))
    return board(OVERVIEW_UID, "ringtrace / cluster overview",
                 "Each run's verdict, proven need and occupancy, rings about to wedge, failed and wedged runs "
                 "over every node running ringtrace.", items,
                 [query_var("instance", "label_values(ringtrace_build_info, instance)", "Node")],
                 [dash_link("Runs across the cluster", CLUSTER_UID), dash_link("Run drill-down", RUN_UID)])


# -- one run --------------------------------------------------------------------------------------------------


def run_dashboard() -> db.Dashboard:
    items: list[Item] = [db.Row("Run")]
    for title, expr, desc, steps in (
        ("Ranks x dispatches", f"count(ringtrace_run_scopes{{{RUN_SEL}}})", "Files of the run shown.", GREEN),
        ("Scopes", f"sum(ringtrace_run_scopes{{{RUN_SEL}}})", "Paired scopes read so far.", GREEN),
        ("Records", f"sum(ringtrace_run_records{{{RUN_SEL}}})", "Boundary records read so far.", GREEN),
        ("Cut-short files", f'count(ringtrace_run_verdict{{kind="cut_short", {RUN_SEL}}}) or vector(0)',
         "Finished files whose records fall short of the metadata's total less dropped (verdict cut short).",
         thresholds((None, "green"), (1, "orange"))),
        ("Wedged scopes", f"sum(ringtrace_wedged_scopes{{{RUN_SEL}}})", "Scopes never closed (finished runs).",
         thresholds((None, "green"), (1, "red"))),
        ("Dropped records", f"sum(ringtrace_run_dropped_records{{{RUN_SEL}}}) or vector(0)",
         "Dropped by the collector.",
         thresholds((None, "green"), (1, "orange"))),
    ):
        items.append(sized(stat_panel(title, expr, desc, steps), 4, 4))

    items += [sized(verdict_table(f"ringtrace_run_verdict{{{RUN_SEL}}}"), 24, 5),
              sized(failed_table(f"ringtrace_run_failed{{{RUN_SEL}}} == 1"), 24, 5)]

    items.append(db.Row("Need and occupancy per rank, ring and resource"))
    items.append(sized(bargauge_panel(
        "Proven need / capacity", f"ringtrace_ring_need_ratio{{{RUN_SEL}}}", PER_RING,
        "The need the records prove (one open scope's tasks held at once, or one task's block) over capacity; task "
        "window and heap only (the dep pool's count is timing). At 100% the run had no headroom."), 12, 12))
    items.append(sized(bargauge_panel(
        "Occupancy / capacity at the latest record", f"ringtrace_ring_occupancy_ratio{{{RUN_SEL}}}", PER_RING,
        "What the ring held at its latest record over what it can hold (a task window of N holds N - 1). Occupancy, "
        "not need: near 100% while records keep coming the ring streams; in a run that stopped it is about to "
        "wedge."), 12, 12))

    items.append(db.Row("High water and capacities"))
    items.append(sized(bargauge_panel("Largest scope high water / usable capacity",
                                      f"ringtrace_ring_high_water_ratio{{{RUN_SEL}}}", PER_RING, HIGH_WATER), 12, 10))
    items.append(sized(table_panel(
        "Capacities per rank (the file's metadata line)",
        [target(f"ringtrace_run_sizes_info{{{RUN_SEL}}}", instant=True, table=True)],
        "Per resource the four rings' capacities (rings 0-3, heap in bytes) and the tensormap's entries.",
        [organize((*HIDDEN, "instance", "Value"))]), 12, 10))

    items.append(db.Row("Sizing: recommended (ringtrace advise; with watch --metrics-advice)"))
    items.append(sized(table_panel(
        "Recommended capacity",
        [target(f"ringtrace_ring_recommended_capacity{{{RUN_SEL}}}", "A", instant=True, table=True),
         target(f"ringtrace_ring_measure_next_capacity{{{RUN_SEL}}}", "B", instant=True, table=True)],
        "Per rank, ring and resource (heap in bytes), when the agent runs with --metrics-advice: "
        "recommended = what `ringtrace advise` sizes from a finished run (with headroom, rounded as the "
        "runtime accepts); measure next = the capacity for the next measurement run where the records "
        "cannot size the ring yet (oversized or wedged runs). The configured sizes are in the table "
        "above; `ringtrace advise` on the program's runs says the same without the flag.",
        [MERGE, organize((*HIDDEN, "instance"), rename={"Value #A": "recommended", "Value #B": "measure next"})]),
        24, 8))

    items.append(db.Row("Wedged scopes, files"))
    items.append(sized(table_panel(
        "Where each rank wedged",
        [target(f"(ringtrace_wedged_scopes{{{RUN_SEL}}} > 0) * ignoring(site, depth, ring) "
                f"group_left(site, depth, ring) ringtrace_wedged_innermost_scope_info{{{RUN_SEL}}}",
                instant=True, table=True)],
        "The innermost scope a finished run left open (where it stopped); Value: the scopes left open. "
        "The events file and `ringtrace summary` list them all.", [organize()]), 24, 8))
    items.append(sized(table_panel(
        "Files",
        [target(f"ringtrace_run_info{{{RUN_SEL}}}", "A", instant=True, table=True),
         target(f"time() - ringtrace_run_last_record_timestamp_seconds{{{RUN_SEL}}}", "B", instant=True, table=True)],
        "Path, program, schema version and finish reason (empty while open) per file; Value #B: seconds "
        "since ringtrace last read a new record of it.", [MERGE, organize((*HIDDEN, "Value #A"))], units.Seconds),
        24, 6))
    return board(RUN_UID, "ringtrace / run",
                 "One run's verdict, and per rank, ring and resource its proven need, occupancy and capacities.",
                 items,
                 [query_var("run", "label_values(ringtrace_run_scopes, run)", "Run", multi=False),
                  query_var("rank", 'label_values(ringtrace_run_scopes{run=~"$run"}, rank)', "Rank"),
                  query_var("dispatch", 'label_values(ringtrace_run_scopes{run=~"$run", rank=~"$rank"}, dispatch)',
                            "Dispatch")],
                 [dash_link("Runs across the cluster", CLUSTER_UID), dash_link("Overview by node", OVERVIEW_UID)])


DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "ringtrace-cluster.json": cluster, "ringtrace-overview.json": overview, "ringtrace-run.json": run_dashboard}


def render(build: Callable[[], db.Dashboard]) -> str:
    """The dashboard's JSON model as Grafana imports it (the SDK's encoder)."""
    return json.dumps(build().build(), cls=JSONEncoder, indent=2) + "\n"


def main() -> int:
    for name, build in DASHBOARDS.items():
        (HERE / name).write_text(render(build), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
