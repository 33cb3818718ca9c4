"""The alerts' report and trace links, followed against a real agent.

``watch --report-dir --perfetto-dir --metrics-addr`` over a copy of the sample L3 run (two ranks): the links
are rendered from ``deploy/prometheus/ringtrace-alerts.yml``'s own annotation templates for a rank's labels
and the agent's address (its ``instance``), then fetched from the agent.
"""

from __future__ import annotations

import re
import shutil
import urllib.parse
from pathlib import Path

import yaml

from tests._support.agent import Agent, Proc
from tests._support.samples import L3
from tests._support.verdicts import trace_packets
from tests._support.writer import wait_for

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy/prometheus/ringtrace-alerts.yml"
RUN = L3.name
_LINK = re.compile(r"\{\{ with first \. -\}\}\s*(.*?)\s*\{\{- end \}\}")
_FIELD = re.compile(r"\{\{ \.Labels\.(\w+)( \| urlquery)? \}\}")


def link_templates() -> dict[str, set[str]]:
    """The URL line of every alert's ``report`` and ``trace`` annotation (the part inside ``with first .``)."""
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    out: dict[str, set[str]] = {"report": set(), "trace": set()}
    for rule in rules:
        for kind in out:
            if kind in rule.get("annotations", {}):
                out[kind].update(_LINK.findall(rule["annotations"][kind]))
    return out


def render(template: str, labels: dict[str, str]) -> str:
    """``template`` with ``{{ .Labels.X }}`` and ``{{ .Labels.X | urlquery }}`` filled as Go's templates do
    (urlquery is Go's QueryEscape: a space is ``+``); anything else left would fail the test."""
    def one(m: re.Match[str]) -> str:
        value = labels[m[1]]
        return urllib.parse.quote_plus(value) if m[2] else value

    done = _FIELD.sub(one, template)
    assert "{{" not in done, done
    return done


def fetch(url: str) -> tuple[int, bytes, dict[str, str]]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_the_alerts_links_fetch_the_ranks_page_and_trace_from_the_agent(tmp_path: Path,
                                                                        agents: list[Proc]) -> None:
    root, pages, traces = tmp_path / "tree", tmp_path / "pages", tmp_path / "traces"
    shutil.copytree(L3, root / "build_output" / RUN)
    pages.mkdir()
    agent = Agent(str(root), tmp_path / "ev.jsonl", "--report-dir", str(pages), "--perfetto-dir", str(traces))
    agents.append(agent)
    wait_for(lambda: len(list(pages.glob("*.html"))) == 2 and len(list(traces.glob("*.pftrace"))) == 2,
             timeout=60, what="both ranks' pages and traces")
    templates = link_templates()
    assert templates["report"] and templates["trace"]
    instance = f"127.0.0.1:{agent.port}"
    for rank in ("0", "1"):
        labels = {"instance": instance, "run": RUN, "rank": rank, "dispatch": rank}
        for template in templates["report"]:
            code, body, _ = fetch(render(template, labels))
            assert code == 200, body
            page = body.decode()
            assert f"dfx_outputs/rank{rank}/d{rank}" in page and f"dfx_outputs/rank{1 - int(rank)}/" not in page
        for template in templates["trace"]:
            ui, _, url = render(template, labels).partition("#!/?url=")
            assert ui == "https://ui.perfetto.dev/"
            code, body, headers = fetch(url)
            assert code == 200 and headers["Access-Control-Allow-Origin"] == "https://ui.perfetto.dev"
            served = tmp_path / f"served-{rank}.pftrace"
            served.write_bytes(body)
            assert trace_packets(served)  # the official decoder reads it
            [written] = traces.glob(f"{RUN}-rank{rank}-d{rank}-*.pftrace")
            assert body == written.read_bytes()
    base = f"http://{instance}"
    for path, want in [(f"/report/{RUN}/2/2", 404), ("/trace/other/0/0", 404), (f"/report/{RUN}/0/1", 404),
                       ("/report/..%2F..%2Fetc/0/0", 400), ("/trace/%2E%2E/0/0", 400), ("/report/a%00b/0/0", 400),
                       ("/report/../../../etc/passwd", 404), (f"/report/{RUN}/0", 404)]:
        code, body, _ = fetch(base + path)
        assert code == want, (path, code, body)
        assert body.count(b"\n") == 1, body  # one line
    assert agent.stop()[0] == 0


def test_without_the_dirs_the_links_answer_404(tmp_path: Path, agents: list[Proc]) -> None:
    root = tmp_path / "tree"
    shutil.copytree(L3, root / "build_output" / RUN)
    agent = Agent(str(root), tmp_path / "ev.jsonl")
    agents.append(agent)
    wait_for(lambda: agent.metric("ringtrace_runs_finished_total") == 2, timeout=60, what="both ranks finished")
    for kind in ("report", "trace"):
        assert agent.get(f"/{kind}/{RUN}/0/0")[0] == 404
    assert agent.stop()[0] == 0
