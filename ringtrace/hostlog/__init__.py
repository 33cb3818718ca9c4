"""The runtime's host log: :mod:`.parse` (bytes -> :class:`~ringtrace.model.records.HostLog`, pure,
streaming), :mod:`.match` (which run a log belongs to, pure), :mod:`.read` (a log file read whole or at its
edges, blocking: the caller's thread) and :mod:`.plan` (the one-shot commands' logs: found, read, matched)."""
