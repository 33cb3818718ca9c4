"""Reading runs: :mod:`.oneshot` (whole files, synchronously: ``summary``, ``check``, ``convert``,
``report``, ``advise``, all through ``ringtrace.cli.common``), and the live agent: :mod:`.tail` (the
tailer, followers, watchers; reader thread), :mod:`.app` (the event loop, the task group, bounded queues)
and its rooms (:mod:`.reader_task`, :mod:`.watching`, :mod:`.saving`, :mod:`.waits`), :mod:`.metrics`
(the agent's own families) and :mod:`.service` (the sinks and the metrics server assembled from the
configuration)."""
