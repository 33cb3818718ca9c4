"""One answer per program, said one way: for the same evidence every surface gives the same size and verb.

For each folder of real runs of the runtime (the tuning loops', the user's ``outputs/`` of many cases and sizes,
the shared sizing samples): each run's advice in ``summary --format json``, in ``advise --format json``'s files,
in the report's page data and in the overview's cell is one set of entries, each with the size of its program's
answer (``advise``'s programs) and the verb said relative to the run's own size (``action``).  A failed run's
advice never keeps the size it failed with.  A file named alone is its own program: ``advise FILE`` and the
per-run advice ``watch`` exposes (``RunFinished.advice``, ``/metrics`` with ``--metrics-advice``) agree.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from ringtrace.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "realsim"
FOLDERS = [*sorted(p / "outputs" for p in (FIXTURES / "loops").iterdir()),
           *([FIXTURES / "outputs"] if (FIXTURES / "outputs").is_dir() else [])]
Entry = dict[str, Any]


def cli(*args: str, columns: int = 400) -> tuple[int, str]:
    buf = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        with contextlib.redirect_stdout(buf):
            code = main(list(args))
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return code, buf.getvalue()


def target(a: Entry) -> int:
    value = a["recommended"] if a["recommended"] is not None else a["measure_next"]
    assert value is not None, a
    return int(value)


def keyed(entries: list[Entry]) -> dict[tuple[int, str], tuple[int, str]]:
    return {(a["ring"], a["resource"]): (target(a), a["action"]) for a in entries}


def where(f: Entry) -> str:
    return str(f["path"] or f["host_log"]["path"])


@pytest.fixture(scope="module", params=FOLDERS, ids=lambda p: p.parent.name if p.name == "outputs" else p.name)
def answers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder: Path = request.param
    _, adv = cli("advise", "--format", "json", str(folder))
    _, summ = cli("summary", "--format", "json", str(folder))
    page = tmp_path_factory.mktemp("report") / "r.html"
    assert cli("report", "-o", str(page), str(folder))[0] in (0, 1)
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page.read_text(), re.S)
                      .group(1))  # type: ignore[union-attr]
    _, text = cli("summary", str(folder))
    return {"advise": json.loads(adv), "summary": json.loads(summ), "report": data, "text": text}


def programs_by_source(adv: dict[str, Any]) -> dict[str, Entry]:
    return {src: p for p in adv["programs"] if not p["covers"] for src in p["sources"]}


def test_each_runs_advice_is_its_programs_size(answers: dict[str, Any]) -> None:
    by_source = programs_by_source(answers["advise"])
    for f in answers["summary"]["files"]:
        program = by_source[where(f)]
        mine = {k: size for k, (size, _) in keyed(f["advice"]).items()}
        assert mine == {k: size for k, (size, _) in keyed(program["advice"]).items()}, where(f)
        assert f["advice_evidence"] == ("this run's evidence" if program["runs"] == 1 else
                                        f"program {program['program']}: {program['runs']} runs' evidence")


def test_summary_advise_and_the_report_say_the_same_words(answers: dict[str, Any]) -> None:
    summary = {where(f): keyed(f["advice"]) for f in answers["summary"]["files"]}
    for f in answers["advise"]["files"]:
        assert keyed(f["advice"]) == summary[f["path"]], f["path"]
    report = {where(s["file"]): keyed(s["file"]["advice"]) for s in answers["report"]["sources"]}
    assert report == summary
    shown = {p["program"]: keyed(p["advice"]) for p in answers["report"]["programs"]}
    assert shown == {p["program"]: keyed(p["advice"]) for p in answers["advise"]["programs"]}


def test_the_overview_cell_says_one_of_the_runs_entries(answers: dict[str, Any]) -> None:
    phrases = {f"ring {ring} {res}: {act}" for f in answers["summary"]["files"]
               for (ring, res), (_, act) in keyed(f["advice"]).items()}
    lines = answers["text"].split("\n\n", 1)[0].splitlines()
    if len(answers["summary"]["files"]) < 2:
        return
    head = next(i for i, line in enumerate(lines) if line.startswith("source"))
    col = lines[head].index("advice")
    cells = [re.sub(r" \(\+\d+ more\)$", "", line[col:].strip()) for line in lines[head + 1:]]
    assert cells and all(c in phrases or c in ("-", "keep the sizes") for c in cells), cells


def test_a_failed_run_is_never_told_to_keep_the_size_it_failed_with(answers: dict[str, Any]) -> None:
    for f in answers["summary"]["files"]:
        v = f["verdict"]
        if v["kind"] not in ("failed", "wedged") or v["resource"] is None:
            continue
        named = [a for a in f["advice"] if a["resource"] == v["resource"] and v["ring"] in (None, a["ring"])]
        assert named, (where(f), v)
        if (f["host_log"] or {}).get("deadlock") and f["host_log"]["deadlock"].get("backstop") and \
                any(Path(where(f)).parent.name in n and "wall-clock give-up" in n for p in answers["advise"]["programs"]
                    for n in p["notes"]):
            continue  # the allocator's wall-clock give-up at a size that completed: set aside as load, and said
        assert not any(a["action"].startswith("keep") for a in named), (where(f), named)
        for a in named:
            if a["capacity"] is not None:
                assert target(a) > a["capacity"], (where(f), a)


@pytest.mark.parametrize("program", sorted(p.name for p in (FIXTURES / "loops").iterdir())[:6])
def test_a_file_named_alone_is_its_own_program(program: str) -> None:
    """``advise FILE`` (one program of one run) and what ``watch --metrics-advice`` exposes for that run on its
    own (``RunFinished.advice``, through the Prometheus sink): the same entries, the same sizes."""
    from ringtrace.analysis.advise import action
    from ringtrace.sinks import FanOut
    from ringtrace.sinks.prometheus import PrometheusSink
    from tests._support.events import finished
    from tests._support.prometheus import Clock, pick, series
    from tests._support.verdicts import verdict_events

    for path in sorted((FIXTURES / "loops" / program / "outputs").glob("*/scope_stats/*.gz")):
        _, out = cli("advise", "--format", "json", str(path))
        [p] = json.loads(out)["programs"]
        events = verdict_events([path])
        [fin] = finished(events)
        assert fin.advice is not None
        assert {(a.ring, a.resource): action(a) for a in fin.advice.advice} == \
            {(a["ring"], a["resource"]): a["action"] for a in json.loads(out)["files"][0]["advice"]}
        assert p["runs"] == 1 and {(a.ring, a.resource) for a in fin.advice.advice} == \
            {(a["ring"], a["resource"]) for a in p["advice"]}
        sink = PrometheusSink(clock=Clock(), advice=True)
        FanOut([sink]).receive_all(events)
        shown = {(int(dict(lab)["ring"]), dict(lab)["resource"]): int(v) for name in
                 ("ringtrace_ring_recommended_capacity", "ringtrace_ring_measure_next_capacity")
                 for lab, v in pick(series(sink), name).items()}
        assert shown == {(a["ring"], a["resource"]): target(a) for a in p["advice"]}, path


def test_a_run_that_is_no_evidence_carries_no_advice_and_moves_no_answer(tmp_path: Path) -> None:
    """A file holding its metadata line and no record proves no need: every surface pools the same runs
    (``analysis.advise.evidence``), so such a run, even one that says it completed at sizes far below the
    need, changes neither the program's answer nor its runs' advice, and carries none itself."""
    import gzip
    import shutil

    folder = tmp_path / "outputs"
    shutil.copytree(FIXTURES / "loops" / "bgemm" / "outputs", folder)
    code, before = cli("summary", "--format", "json", str(folder))
    assert code == 0
    last = sorted(p for p in folder.iterdir() if p.is_dir())[-1]
    meta = json.loads(gzip.decompress((last / "scope_stats" / "scope_stats.jsonl.gz").read_bytes()).split(b"\n")[0])
    empty = folder / f"{last.name[:-6]}235959" / "scope_stats"  # the same case, run last
    empty.mkdir(parents=True)
    tiny = {**meta, "total": 0, "task_window_max": [4] * 4, "heap_max": [1024] * 4, "dep_pool_max": [4] * 4}
    (empty / "scope_stats.jsonl").write_text(json.dumps(tiny) + "\n")
    code, after = cli("summary", "--format", "json", str(folder))
    assert code == 0
    code, adv = cli("advise", "--format", "json", str(folder))
    assert code == 0
    files = {where(f): f for f in json.loads(after)["files"]}
    [added] = [f for p, f in files.items() if "235959" in p]
    assert added["advice"] == [] and added["records"] == 0
    was = {where(f): f["advice"] for f in json.loads(before)["files"]}
    assert {p: f["advice"] for p, f in files.items() if p in was} == was
    [prog] = json.loads(adv)["programs"]
    for f in files.values():  # and what advise says is what summary says
        if f["advice"]:
            assert keyed(f["advice"]) == {k: (v, keyed(f["advice"])[k][1]) for k, (v, _) in
                                          keyed(prog["advice"]).items() if k in keyed(f["advice"])}
