"""Several sources at a glance, in real Chromium: the L3 heatmap, verdicts in a few words, sentences said once.

The real two-rank L3 run (``tests/fixtures/samples``): a rank x dispatch x ring heatmap whose every cell links to
its source's section and is coloured by the proven need's share of capacity (oracle: ``summary --format json``,
``need_ratio``).  An eight-rank tree written by ``ringtrace.demo.sim`` (one rank wedges): the problem is outlined
on its ring, sources with the same verdict share one overview row, and a finding several ranks share is said
once on the page (and a finding both real ranks share).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ringtrace.demo import sim
from tests._support.report_page import Browser, name_of, summary_json, write_report
from tests._support.samples import L3

KIND = {"no_headroom": "no headroom", "near_capacity": "near capacity", "cut_short": "cut short",
        "test_failed": "test failed"}


def ring_use(f: dict[str, Any], ring: int) -> str:
    """The heatmap cell's expected ``data-use``: the largest proven-need ratio of the ring's resources in use."""
    rows = [r for r in f["rings"] if r["ring"] == ring and (r["high_water"] or r["live_at_exit"] or r["alloc"]
                                                             or r["proven_need"])]
    return "" if not rows else str(max(r["need_ratio"] or 0 for r in rows))


def sections(o: Any) -> dict[str, int]:
    return {name: i for i, name in enumerate(o.page.locator("section.source h2").all_inner_texts())}


def test_the_l3_heatmap_links_every_cell_to_its_section(chromium: Browser, tmp_path: Path) -> None:
    o = chromium.open(write_report(tmp_path / "r.html", L3))
    o.shot("l3", ".overview-box")
    assert o.clean(), (o.errors, o.requests)
    files = summary_json(L3)
    at = sections(o)
    heat = o.page.locator("table.heat")
    assert heat.count() == 1 and heat.get_attribute("data-run") == files[0]["labels"]["run"]
    rows = heat.locator("tr").all_inner_texts()
    ranks = sorted({f["labels"]["rank"] for f in files}, key=int)
    assert [r.split("\t")[0].strip() for r in rows[1:]] == [f"rank {r}" for r in ranks]
    for f in files:
        i = at[name_of(f)]
        cells = heat.locator(f"a.cell[href='#s{i}']")
        assert cells.count() == 4
        for ring in range(4):
            cell = heat.locator(f"a.cell[href='#s{i}'][data-ring='{ring}']")
            got, want = cell.get_attribute("data-use"), ring_use(f, ring)
            assert (got == want == "") or abs(float(got) - float(want)) < 1e-9, (f["path"], ring, got, want)
            assert ("idle" in (cell.get_attribute("class") or "").split()) == (want == "")
    # a finding both ranks share: said once on the page
    shared: dict[str, int] = {}
    for f in files:
        for m in {x["message"] for x in f["findings"]}:
            shared[m] = shared.get(m, 0) + 1
    said = o.page.locator(".line .msg").all_inner_texts()
    assert [m for m, n in shared.items() if n > 1], "the sample's ranks share a finding"
    for m, n in shared.items():
        assert said.count(m) == 1, (m, n)
    # a cell's link goes to its section
    first = heat.locator("a.cell").first
    target = first.get_attribute("href")
    first.click()
    o.page.wait_for_function("(h) => location.hash === h", arg=target)
    assert o.clean(), o.errors


def test_an_eight_rank_tree_says_each_thing_once(chromium: Browser, tmp_path: Path) -> None:
    for _ in sim.write_tree(tmp_path / "tree", ranks=8, dispatches=2):
        pass
    o = chromium.open(write_report(tmp_path / "r.html", tmp_path / "tree"))
    o.shot("l3-eight-ranks", ".overview-box")
    assert o.clean(), (o.errors, o.requests)
    files = summary_json(tmp_path / "tree")
    assert len(files) == 17
    at = sections(o)
    # every source linked once from the overview table, sources with the same verdict words on one row
    links = [a.get_attribute("data-name") for a in o.page.locator("table.overview a.src").all()]
    assert sorted(links) == sorted(name_of(f) for f in files)
    assert o.page.locator("table.overview tr").count() - 1 < len(files)
    # the problem outlined, on the ring its verdict names
    for f in files:
        v = f["verdict"]
        if not f["labels"]["rank"]:
            continue
        td = o.page.locator(f"table.heat td[data-source='{at[name_of(f)]}']")
        assert td.get_attribute("class") == f"sev-{v['severity']}"
        culprit = td.locator("a.culprit")
        if v["severity"] != "ok" and v["ring"] is not None:
            assert culprit.count() == 1 and culprit.get_attribute("data-ring") == str(v["ring"])
        else:
            assert culprit.count() == 0
    assert o.page.locator("table.heat td.sev-error").count() == sum(
        f["verdict"]["severity"] == "error" for f in files if f["labels"]["rank"])
    # the verdict in a few words: kind, site, ring and resource, code
    for f in files:
        v = f["verdict"]
        words = o.page.locator(f"section#s{at[name_of(f)]} .verdict").locator(".chip, .word").all_inner_texts()
        assert words[0] == KIND.get(v["kind"], v["kind"])
        if v["site"]:
            assert words[1] == v["site"]
        if v["code"] is not None:
            assert words[-1] == f"{v['code_name']} ({v['code']})"
        assert len(" · ".join(words)) < 100
    # the same verdict on fifteen ranks: one row; no verdict sentence shown twice (in full: on hover or a click)
    healthy = [f for f in files if f["labels"]["rank"] and f["verdict"]["kind"] == "healthy"]
    assert len(healthy) == 15
    row = o.page.locator("table.overview tr", has=o.page.locator(f"a.src[data-name='{name_of(healthy[0])}']"))
    assert row.locator("a.src").count() == 15
    shown = o.page.locator("body").inner_text()
    for text in {f["verdict"]["text"] for f in files}:
        assert shown.count(text) <= 1, text
