"""The live agent (``watch``, ``demo``): :mod:`.tail` (the tailer, followers, watchers; reader thread; host
logs paired by :mod:`ringtrace.gather.pairing`'s rules), :mod:`.app` (the event loop, the task group, bounded
queues) and its rooms (:mod:`.reader_task`, :mod:`.watching`, :mod:`.saving`, :mod:`.waits`), :mod:`.metrics`
(the agent's own families), :mod:`.service` (the sinks and the metrics server assembled from the
configuration) and :mod:`.registry` (every sink declared once).  The one-shot commands read through
:mod:`ringtrace.gather`."""
