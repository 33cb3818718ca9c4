"""The report's time charts in real Chromium, on real runtime files: axes, units, capacity, marks, hover, zoom.

Oracles are the files themselves (every record's counters, read here with ``json``) and ``summary --format
json``: a chart per ring and resource whose counters moved, the others on one "unused" line; tick labels on
both axes and a capacity label on every chart; the wedge labelled once, no label over another; the tooltip
names the record's line, site, depth and value; dragging zooms every chart of the run to the same range and a
double-click resets it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ringtrace.model.runtime import BY_NAME, RESOURCES
from tests._support.report_page import (
    PA_LOOP,
    Browser,
    Opened,
    amount,
    boxes,
    overlapping,
    summary_json,
    write_report,
)
from tests._support.samples import FLOW, L3, SAMPLES

WORDS = {"task_window": "task window", "heap": "heap", "dep_pool": "dep pool"}


def records(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text().splitlines()
    return [dict(json.loads(text), line=n) for n, text in enumerate(lines[1:], start=2) if text.strip()]


def moved(path: Path, obj: dict[str, Any]) -> set[tuple[int, str]]:
    """(ring, resource) whose occupancy moved at some record, or whose scopes show a figure."""
    out = {(r["ring"], res) for r in records(path) for res in RESOURCES
           if f"{res}_end" in r and r[f"{res}_end"] - r[f"{res}_start"] != 0}
    return out | {(r["ring"], r["resource"]) for r in obj["rings"] if r["high_water"] or r["proven_need"]}


def chart_keys(o: Opened, section: str) -> list[tuple[int, str]]:
    charts = o.page.locator(f"{section} .chart[data-ring]:not([data-ring='-'])")
    return [(int(c.get_attribute("data-ring")), c.get_attribute("data-resource")) for c in charts.all()]


def check_axes(o: Opened, section: str) -> None:
    """Every chart: at least two tick labels on each axis, a non-empty capacity label; heap ticks in bytes units."""
    charts = o.page.locator(f"{section} .chart")
    assert charts.count() > 0
    for c in charts.all():
        ys = c.locator("g.y-axis text.tick").all_text_contents()
        xs = c.locator("g.x-axis text.tick").all_text_contents()
        assert len(ys) >= 2 and len(xs) >= 2, (ys, xs)
        assert all(re.fullmatch(r"[\d,]+", x) for x in xs), xs  # record lines
        if c.get_attribute("data-resource") == "heap":
            assert all(re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)", y) for y in ys), ys
        else:
            assert all(re.fullmatch(r"[\d,]+", y) for y in ys), ys
        cap = c.locator("text.cap-label").all_text_contents()
        assert len(cap) == 1 and cap[0].startswith("capacity "), cap
        res = c.get_attribute("data-resource")
        unit = BY_NAME[res].unit if res in BY_NAME else "entries"  # the runtime's table; the tensormap's entries
        assert c.locator("g.y-axis text.axis-title").text_content() == unit, unit


def plot_point(o: Opened, chart: Any, line: int) -> tuple[float, float]:
    """The on-screen point of record ``line`` in the middle of ``chart``'s plot."""
    chart.scroll_into_view_if_needed()
    s = chart.locator("svg.tchart")
    x0, x1 = float(s.get_attribute("data-x0")), float(s.get_attribute("data-x1"))
    box = chart.locator("rect.overlay").bounding_box()
    return box["x"] + box["width"] * (line - x0) / (x1 - x0), box["y"] + box["height"] / 2


def test_a_wedged_run_charts_what_moved_with_axes_and_one_wedge_label(chromium: Browser, tmp_path: Path) -> None:
    run = FLOW.parents[2]
    o = chromium.open(write_report(tmp_path / "r.html", run))
    o.shot("wedged", "section#s0", "section#s0 .chart")  # the verdict down to the first chart
    assert o.clean(), (o.errors, o.requests)
    [obj] = summary_json(run)
    v = obj["verdict"]
    sec = "section#s0"
    assert o.page.locator(f"{sec} .verdict .chip").inner_text() == "wedged"
    words = o.page.locator(f"{sec} .verdict .word").all_inner_texts()
    assert words == [v["site"], f"ring {v['ring']} {WORDS[v['resource']]}", f"{v['code_name']} ({v['code']})"]
    assert o.page.locator(f"{sec} .verdict details").inner_text(timeout=1000).startswith("in full")
    want = moved(FLOW, obj)
    assert sorted(chart_keys(o, sec)) == sorted(want)
    unused = o.page.locator(f"{sec} .unused").inner_text()
    for ring in range(4):
        missing = [WORDS[r] for r in RESOURCES if (ring, r) not in want]
        if len(missing) == 3:
            assert f"ring {ring}: all" in unused
        elif missing:
            assert f"ring {ring}: {', '.join(missing)}" in unused
    check_axes(o, sec)
    assert o.page.locator(".legend").count() == 1
    labels = o.page.locator(".wedge-label").all_text_contents()
    assert labels == [f"WEDGED {v['site']}"]
    chart = o.page.locator(f"{sec} .chart[data-ring='{v['ring']}'][data-resource='{v['resource']}']")
    assert chart.locator(".wedge-label").count() == 1
    labels_drawn = boxes(o.page, "svg.tchart .mark-label, svg.tchart .cap-label, svg.tchart .need-label")
    assert labels_drawn and not overlapping(labels_drawn), "labels drawn over each other"
    # hover on the wedge's record: its line, site, depth and the task window in use there, with its unit
    rec = next(r for r in records(FLOW) if r["line"] == v["line"])
    o.page.mouse.move(*plot_point(o, chart, v["line"]))
    tip = o.page.locator("#tip").inner_text()
    used = rec["task_window_end"] - rec["task_window_start"]
    cap = json.loads(FLOW.read_text().splitlines()[0])["task_window_max"][v["ring"]]
    assert tip.startswith(f"line {v['line']} · {rec['site']} · depth {rec['depth']}"), tip
    assert f"task window in use {used} tasks of {cap} tasks" in tip, tip


def test_hover_and_zoom_on_a_long_real_run(chromium: Browser, tmp_path: Path) -> None:
    o = chromium.open(write_report(tmp_path / "r.html", L3))
    assert o.clean(), (o.errors, o.requests)
    files = summary_json(L3)
    names = o.page.locator("section.source h2").all_inner_texts()
    i = next(n for n, name in enumerate(names) if name.endswith("rank1/d1"))
    path = Path(next(f["path"] for f in files if f["labels"]["rank"] == "1"))
    sec = f"section#s{i}"
    check_axes(o, sec)
    recs = records(path)
    first, last = recs[0]["line"], recs[-1]["line"]
    svgs = o.page.locator(f"{sec} svg.tchart")
    assert {(s.get_attribute("data-x0"), s.get_attribute("data-x1")) for s in svgs.all()} == {
        (str(first - 0.5), str(last + 0.5))}
    chart = o.page.locator(f"{sec} .chart[data-ring='3'][data-resource='heap']")
    # hover: the value at a record of ring 3 (the column's most, its site and line)
    by_line = {r["line"]: r for r in recs}
    mid = next(r["line"] for r in recs if r["ring"] == 3 and r["line"] > (first + last) // 2)
    o.page.mouse.move(*plot_point(o, chart, mid))
    tip = o.page.locator("#tip").inner_text()
    m = re.match(r"line (\d+) · (\S+) · depth (\d+)\nheap in use ([\d.]+ (?:B|KiB|MiB)) of 32.0 KiB", tip)
    assert m, tip
    r = by_line[int(m[1])]
    assert (r["site"], r["depth"], r["ring"]) == (m[2], int(m[3]), 3)
    assert amount("heap", r["heap_end"] - r["heap_start"]) == m[4]
    # drag from 20% to 45% of the plot: every chart of this run shows that range
    chart.scroll_into_view_if_needed()
    box = chart.locator("rect.overlay").bounding_box()
    y = box["y"] + box["height"] / 2
    o.page.mouse.move(box["x"] + 0.2 * box["width"], y)
    o.page.mouse.down()
    o.page.mouse.move(box["x"] + 0.3 * box["width"], y, steps=4)
    o.page.mouse.move(box["x"] + 0.45 * box["width"], y, steps=4)
    o.page.mouse.up()
    ranges = {(s.get_attribute("data-x0"), s.get_attribute("data-x1")) for s in svgs.all()}
    assert len(ranges) == 1
    x0, x1 = map(float, ranges.pop())
    span = last - first + 1
    assert abs((x0 - (first - 0.5)) - 0.2 * span) <= 2 and abs((x1 - (first - 0.5)) - 0.45 * span) <= 2, (x0, x1)
    ticks = [int(t.replace(",", "")) for t in chart.locator("g.x-axis text.tick").all_text_contents()]
    assert len(ticks) >= 2 and all(x0 <= t <= x1 for t in ticks), ticks
    o.shot("zoomed", f"{sec} .chart[data-ring='3'][data-resource='heap']")
    # a hover inside the zoomed range names a record inside it
    o.page.mouse.move(box["x"] + 0.5 * box["width"], y)
    hit = re.match(r"line (\d+)", o.page.locator("#tip").inner_text())
    assert hit
    line = int(hit[1])
    assert x0 <= line <= x1
    # double-click resets every chart to the whole run
    o.page.mouse.dblclick(box["x"] + 0.5 * box["width"], y)
    assert {(s.get_attribute("data-x0"), s.get_attribute("data-x1")) for s in svgs.all()} == {
        (str(first - 0.5), str(last + 0.5))}
    # a narrower window: the charts are drawn again at its width, axes and all
    wide = float(svgs.first.get_attribute("width"))
    o.page.set_viewport_size({"width": 900, "height": 900})
    o.page.wait_for_function("(w) => +document.querySelector('svg.tchart').getAttribute('width') < w", arg=wide)
    check_axes(o, sec)
    assert o.clean(), o.errors


def test_no_two_labels_of_a_chart_overlap_on_any_real_run(chromium: Browser, tmp_path: Path) -> None:
    """Every chart of every real run (the samples and the report's tuning loop): its capacity, proven-need and
    mark labels' on-screen boxes never overlap, at a wide and a narrow page.  (A ring whose capacity is off the
    chart's scale put its label at the top, where a proven need near the top drew its own.)"""
    page = write_report(tmp_path / "all.html", SAMPLES, PA_LOOP)
    for width in (1300, 700):
        o = chromium.open(page, width=width)
        charts = o.page.locator("svg.tchart")
        assert charts.count() > 20
        crossed = []
        for i in range(charts.count()):
            chart = charts.nth(i)
            chart.scroll_into_view_if_needed()
            labels = chart.locator(".mark-label, .cap-label, .need-label")
            bs = [dict(labels.nth(j).bounding_box() or {}, text=labels.nth(j).text_content())
                  for j in range(labels.count())]
            bs = [{"x": b["x"], "y": b["y"], "w": b["width"], "h": b["height"], "text": b["text"]}
                  for b in bs if "x" in b]
            crossed += overlapping(bs)
        assert crossed == [], crossed
