"""The runtime's host log: :mod:`.parse` (bytes -> :class:`~ringtrace.model.records.HostLog`, pure,
streaming) and :mod:`.read` (a log file read whole or at its edges, blocking: the caller's thread).  Which
logs a read uses and which run each belongs to: :mod:`ringtrace.gather`."""
