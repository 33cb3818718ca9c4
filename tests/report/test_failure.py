"""A failed run without records (the runtime's simulator writes none) in real Chromium: the ring at the failure.

The picture is the host log's deadlock report (oracle: ``summary --format json``'s ``host_log.deadlock``, parsed
from the real log): a bar of the ring's state (used, available) against its capacity, the request below it,
with tick labels on both axes, a capacity label, the code and the sizes in words; and no time chart at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._support.report_page import Browser, summary_json, write_report
from tests._support.samples import FAILED

WORDS = {"task_window": "task window", "heap": "heap", "dep_pool": "dep pool"}


def with_unit(resource: str, n: int) -> str:
    if resource != "heap":
        names = ("task", "tasks") if resource == "task_window" else ("entry", "entries")
        return f"{n} {names[n != 1]}"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


@pytest.mark.parametrize("case", ["VectorExample_heap128k_abort", "VectorExample_dep_pool4"])
def test_a_failed_run_without_records_is_drawn_from_its_host_log(chromium: Browser, tmp_path: Path, case: str) -> None:
    run = FAILED / case
    o = chromium.open(write_report(tmp_path / "r.html", run))
    if case.startswith("VectorExample_heap"):
        o.shot("failed", "section#s0")
    assert o.clean(), (o.errors, o.requests)
    [obj] = summary_json(run)
    assert obj["path"] is None and obj["records"] == 0  # the simulator wrote no file
    d, v = obj["host_log"]["deadlock"], obj["verdict"]
    sec = o.page.locator("section#s0")
    assert sec.get_attribute("data-verdict") == "failed" and sec.locator(".chart").count() == 0
    assert sec.locator(".unused").count() == 0  # nothing "never moved": nothing was recorded
    words = sec.locator(".verdict .word").all_inner_texts()
    assert words[-1] == f"{v['code_name']} ({v['code']})"
    assert (f"ring {v['ring']} " if v["ring"] is not None else "") + WORDS[v["resource"]] in words
    bar = sec.locator(".failure")
    assert bar.count() == 1 and bar.get_attribute("data-resource") == d["resource"]
    head = bar.locator("h3").inner_text()
    assert head.startswith(f"ring {d['ring']} " if d["ring"] is not None else "ring not named by the report")
    assert f"{v['code_name']} (code {v['code']})" in head
    assert len(bar.locator("g.x-axis text.tick").all_text_contents()) >= 2
    assert bar.locator("g.y-axis text.tick").all_text_contents() == ["ring state", "request"]
    assert bar.locator("text.cap-label").all_text_contents() == [f"capacity {with_unit(d['resource'], d['capacity'])}"]
    facts = bar.locator(".facts:not(.key)").inner_text()
    res = d["resource"]
    used = d["heap_used"] if res == "heap" else d["pool_used"]
    asked = d["requested_bytes"] if res == "heap" else d["pool_needed"]
    assert f"capacity {with_unit(res, d['capacity'])} · used {with_unit(res, used)}" in facts
    assert f"requested {with_unit(res, asked)}" in facts
    if res == "heap":
        assert f"available {with_unit(res, d['heap_available'])}" in facts
    assert f"host.log:{d['line']}" in facts
    # the bars' lengths follow the numbers: the request's bar against the capacity line
    cap_x = bar.locator("svg.fbar line.capacity").bounding_box()["x"]
    asked_box = bar.locator("svg.fbar rect.asked").bounding_box()
    axis0 = bar.locator("g.x-axis line.grid").first.bounding_box()["x"]  # the tick at 0
    assert abs((asked_box["x"] + asked_box["width"] - axis0) / (cap_x - axis0) - asked / d["capacity"]) < 0.02
