"""The agent's own families about its reading, for the Prometheus sink's ``register``: the
file-system watcher's counts (``ringtrace_inotify_*``) and the reader's anomalies
(``ringtrace_runs_appended_after_finish_total``).

:class:`ReadingCollector` reads its two sources at each scrape, on the metrics server's thread: they
must be plain ints (the tree watcher's counts and the tailer's are)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.core import Metric


class WatchCounts(Protocol):
    """The tree watcher's counts (:class:`~ringtrace.reading.tail.inotify.TreeWatcher` has them)."""

    @property
    def watched(self) -> int: ...
    @property
    def unwatched(self) -> int: ...
    @property
    def rewatched(self) -> int: ...
    @property
    def overflows(self) -> int: ...


class ReadingCollector:
    """``tree()``: the inotify watcher's counts (None while polling: no ``ringtrace_inotify_*`` then);
    ``appended()``: the finished runs whose file grew afterwards."""

    def __init__(self, tree: Callable[[], WatchCounts | None], appended: Callable[[], int]) -> None:
        self._tree = tree
        self._appended = appended

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # only when metrics are served

        tree = self._tree()
        if tree is not None:
            yield GaugeMetricFamily("ringtrace_inotify_watches", "Directories with an inotify watch right now.",
                                    value=tree.watched)
            yield GaugeMetricFamily("ringtrace_inotify_unwatched_directories", "Directories the watcher found "
                                    "but could not watch (the watch limit, permissions): changes there are seen "
                                    "at rescans only.", value=tree.unwatched)
            yield CounterMetricFamily("ringtrace_inotify_rewatched", "Directories without a watch that got one "
                                      "from a walk of the whole tree: after an inotify queue overflow (which lost "
                                      "their creation), and at rescans while at the watch limit.",
                                      value=tree.rewatched)
            yield CounterMetricFamily("ringtrace_inotify_overflows", "inotify queue overflows (events lost; the "
                                      "tree is walked again and rescanned).", value=tree.overflows)
        yield CounterMetricFamily("ringtrace_runs_appended_after_finish", "Finished runs whose file received more "
                                  "bytes afterwards (an anomaly: the runtime writes a file once); each is read "
                                  "again and its figures updated where a sink can, and the events file writes it "
                                  "once.", value=self._appended())
