"""A restarted agent keeps serving its finished runs' series (``--state-dir``): ``ringtrace watch`` killed with
SIGKILL after it reported a tree, and started again, serves the same per-run series, value for value, from its
first scrape (no verdict vanishes, so no page resolves and none fires again), and the other sinks do not get
those runs again."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.reading.tail.state import STATE_FILE
from ringtrace.sinks.prometheus._journal import JOURNAL
from tests._support.agent import Agent, Proc, events, put_run
from tests._support.samples import FLOW, PAGED
from tests._support.writer import wait_for

pytestmark = pytest.mark.slow  # watch processes

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def per_run(agent: Proc) -> Series:
    """Every per-run sample of the agent's /metrics ({} while it does not answer)."""
    code, body = agent.get("/metrics")
    if code != 200:
        return {}
    return {(s.name, frozenset(s.labels.items())): s.value for fam in text_string_to_metric_families(body)
            for s in fam.samples if "run" in s.labels}


def runs_with_verdicts(got: Series) -> set[str]:
    return {dict(labels)["run"] for name, labels in got if name == "ringtrace_run_verdict"}


def finished_in_state(state: Path) -> int:
    """Files the saved reading state counts as finished (what a restart does not read again)."""
    try:
        saved = json.loads((state / STATE_FILE).read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for f in saved["files"].values() if f["finished"])


def test_a_killed_agent_serves_its_finished_runs_series_again(tmp_path: Path, agents: list[Proc]) -> None:
    tree, state, ev = tmp_path / "tree", tmp_path / "state", tmp_path / "events.jsonl"
    names = [f"run{i}" for i in range(6)]
    for i, name in enumerate(names):
        put_run(tree, name, FLOW if i % 2 else PAGED)  # wedged (a page) and healthy runs
    first = Agent(str(tree), ev, "--state-dir", str(state))
    agents.append(first)
    wait_for(lambda: runs_with_verdicts(per_run(first)) == set(names), 60, "the six verdicts")
    wait_for(lambda: finished_in_state(state) == 6, 30, "the state to remember the six runs")
    before = per_run(first)
    assert {dict(k)["severity"] for n, k in before if n == "ringtrace_run_verdict"} == {"error", "ok"}
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=30)
    assert (state / JOURNAL).exists()

    again = Agent(str(tree), ev, "--state-dir", str(state))
    agents.append(again)
    wait_for(lambda: again.get("/metrics")[0] == 200, 60, "the restarted agent's /metrics")
    assert per_run(again) == before  # from its first scrape: the same series, the same values

    put_run(tree, "marker", PAGED)  # the other sinks took nothing of the six again: only the new run
    wait_for(lambda: "marker" in runs_with_verdicts(per_run(again)), 60, "the new run's verdict")
    wait_for(lambda: len(events(ev)) == 7, 30, "the new run's event")
    assert [line for line in again.lines if "run finished:" in line and "marker" not in line] == []
    assert sorted(e["labels"]["run"] for e in events(ev)) == sorted([*names, "marker"])
