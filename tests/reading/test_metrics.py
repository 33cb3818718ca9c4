"""The agent's own families (``ringtrace_inotify_*``, ``ringtrace_runs_appended_after_finish_total``):
names, types and values as a scrape shows them, read from their sources at each scrape."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ringtrace.reading.metrics import ReadingCollector
from ringtrace.reading.tail.inotify import TreeWatcher


@dataclass
class Counts:
    watched: int = 0
    unwatched: int = 0
    rewatched: int = 0
    overflows: int = 0


def scrape(collector: ReadingCollector) -> dict[str, tuple[str, float]]:
    """Each sample of one scrape: name -> (its family's type, value)."""
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {s.name: (fam.type, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_watchers_counts_and_the_appended_runs_as_a_scrape_shows_them() -> None:
    counts, appended = Counts(watched=3, unwatched=1, rewatched=7, overflows=2), [4]
    collector = ReadingCollector(lambda: counts, lambda: appended[0])
    assert scrape(collector) == {
        "ringtrace_inotify_watches": ("gauge", 3),
        "ringtrace_inotify_unwatched_directories": ("gauge", 1),
        "ringtrace_inotify_rewatched_total": ("counter", 7),
        "ringtrace_inotify_overflows_total": ("counter", 2),
        "ringtrace_runs_appended_after_finish_total": ("counter", 4),
    }
    counts.watched, counts.overflows, appended[0] = 5, 3, 6  # read again at the next scrape
    got = scrape(collector)
    assert got["ringtrace_inotify_watches"] == ("gauge", 5)
    assert got["ringtrace_inotify_overflows_total"] == ("counter", 3)
    assert got["ringtrace_runs_appended_after_finish_total"] == ("counter", 6)


def test_while_polling_there_is_no_inotify_family() -> None:
    assert scrape(ReadingCollector(lambda: None, lambda: 0)) == {
        "ringtrace_runs_appended_after_finish_total": ("counter", 0)}


def test_a_real_tree_watcher_is_read_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "run" / "scope_stats").mkdir(parents=True)
    tree = TreeWatcher(lambda path: None, lambda: None)
    try:
        asyncio.run(tree.set_points([(tmp_path, True)]))
        got = scrape(ReadingCollector(lambda: tree, lambda: 0))
    finally:
        tree.close()
    assert got["ringtrace_inotify_watches"] == ("gauge", 3)  # the root, run, run/scope_stats
    assert got["ringtrace_inotify_unwatched_directories"] == ("gauge", 0)
