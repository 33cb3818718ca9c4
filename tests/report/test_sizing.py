"""The sizing picture of a program's runs in real Chromium, against ``advise --format json`` on the same runs.

Five real runs of one program (the tuning loop on the runtime's simulator: three completed, one failed with code
2, one with code 4; ``tests/fixtures/report/README.md``).  Per ring and resource of the answer the picture must
say what ``advise`` says: its bracket, estimate and size to set (or to measure next), in its attributes, its
table cells and its geometry (the bracket spans needs-at-least to completed-at on the axis, the runs sit where
their sizes are: completed ones at or above the bracket, failed ones below it).  The runs' sizes are read here
from the files themselves (a completed run's metadata line; a failed run's deadlock report in its host log).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests._support.report_page import PA_LOOP, Browser, Opened, advise_json, amount, summary_json, write_report


def expected_points(files: list[dict[str, Any]], a: dict[str, Any]) -> list[tuple[int, str]]:
    """(capacity, outcome) of every run whose size of (ring, resource) its files state."""
    ring, res = a["ring"], a["resource"]
    out = []
    for f in files:
        if f["path"]:
            meta = json.loads(Path(f["path"]).read_text().splitlines()[0])
            cap = meta[f"{res}_max"][ring]
            if cap:
                ran = f["verdict"]["kind"] in ("healthy", "near_capacity", "no_headroom", "test_failed")  # to its end
                out.append((cap, "completed" if ran else "other"))
            continue
        d = f["host_log"]["deadlock"]
        if d["resource"] != res:
            continue
        if d["ring"] == ring or (d["ring"] is None and (a["upper_bound"] is None or d["capacity"] < a["upper_bound"])):
            out.append((d["capacity"], "failed"))
    return sorted(out)


def center_x(box: dict[str, float]) -> float:
    return box["x"] + box["width"] / 2


def check_row(o: Opened, prog: str, a: dict[str, Any], files: list[dict[str, Any]]) -> None:
    row = o.page.locator(f"section.program[data-program='{prog}'] tr.adv[data-ring='{a['ring']}']"
                        f"[data-resource='{a['resource']}']")
    assert row.count() == 1, a
    pic = row.locator("svg.sizing")
    attr = {k: pic.get_attribute(f"data-{k.replace('_', '-')}") for k in
            ("lower", "upper", "estimate", "recommended", "measure_next")}
    want = {"lower": a["lower_bound"], "upper": a["upper_bound"], "estimate": a["estimate"],
            "recommended": a["recommended"], "measure_next": a["measure_next"]}
    assert attr == {k: "" if v is None else str(v) for k, v in want.items()}
    cells = row.locator("td").all_inner_texts()
    res = a["resource"]
    assert cells[3:6] == [amount(res, a["lower_bound"]), amount(res, a["upper_bound"]), amount(res, a["estimate"])]
    target = a["recommended"] if a["recommended"] is not None else a["measure_next"]
    assert cells[6] == a["action"] and amount(res, target) in cells[6]  # advise's words, and its size
    assert len(pic.locator("g.x-axis text.tick").all_text_contents()) >= 2
    # the runs: where, and how they ended
    points = sorted((int(p.get_attribute("data-capacity")), p.get_attribute("data-outcome"))
                    for p in pic.locator("a[data-outcome]").all())
    assert points == expected_points(files, a)
    # geometry: the bracket from needs-at-least to completed-at; completed runs at or right of it, failures left
    bracket = pic.locator("rect.bracket").bounding_box()
    left, right = bracket["x"], bracket["x"] + bracket["width"]
    for p in pic.locator("a[data-outcome]").all():
        cap, how, x = int(p.get_attribute("data-capacity")), p.get_attribute("data-outcome"), center_x(p.bounding_box())
        if how == "completed" and cap == a["upper_bound"]:
            assert abs(x - right) <= 2.5, (cap, x, right)
        elif how == "completed":
            assert x >= right - 2.5
        elif how == "failed" and a["lower_bound"] is not None and cap < a["lower_bound"]:
            assert x < left, (cap, x, left)
    target = pic.locator("path.rec, path.next")
    assert target.count() == 1
    tx = center_x(target.bounding_box())
    value = a["recommended"] if a["recommended"] is not None else a["measure_next"]
    if a["upper_bound"] is not None:
        assert (tx > right + 1) == (value > a["upper_bound"])
        assert (abs(tx - right) <= 2.5) == (value == a["upper_bound"])
    # the reason: one line, the whole of it on a click
    why = row.locator("xpath=following-sibling::tr[1]")
    assert why.is_hidden()
    row.locator("td.reason").click()
    assert why.is_visible() and why.inner_text().startswith(a["reason"])


def test_the_sizing_picture_says_what_advise_says(chromium: Browser, tmp_path: Path) -> None:
    o = chromium.open(write_report(tmp_path / "r.html", PA_LOOP))
    assert o.clean(), (o.errors, o.requests)
    files = summary_json(PA_LOOP)
    [prog] = advise_json(PA_LOOP)
    assert len(files) == 5 and prog["runs"] == 5
    block = o.page.locator(f"section.program[data-program='{prog['program']}']")
    block.scroll_into_view_if_needed()
    o.shot("program", f"section.program[data-program='{prog['program']}']")
    state = "final sizes" if prog["final"] else "next measurement run"
    assert block.locator("h2").inner_text() == f"Sizing {prog['program']}: {state} (5 runs)"
    snippet = block.locator("pre.runconfig").inner_text()
    for key, value in prog["run_config"].items():
        assert snippet.count(key + "=") == 1, (key, value)
    assert block.locator("tr.adv").count() == len(prog["advice"])
    for a in prog["advice"]:
        check_row(o, prog["program"], a, files)
    # hover on a run: its name, how it ended and its size
    failed = block.locator("a[data-outcome='failed']").first
    failed.scroll_into_view_if_needed()
    failed.hover()
    tip = o.page.locator("#tip").inner_text()
    assert re.match(r"TestPagedAttention_CaseVarSeq4_\d+_\d+: failed: (HEAP_RING_DEADLOCK|DEP_POOL_OVERFLOW)", tip), tip
    # every source's section links to the program's picture
    assert o.page.locator("section.source .to-program a[href='#p0']").count() == 5
    assert o.clean(), o.errors
