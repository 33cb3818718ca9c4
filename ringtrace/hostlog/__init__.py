"""The runtime's host log: :mod:`.parse` (bytes -> :class:`~ringtrace.model.records.HostLog`, pure,
streaming), :mod:`.match` (which run a log belongs to, pure), :mod:`.read` (a log file read whole or at its
edges, blocking: the caller's thread) and :mod:`.plan` (the one-shot commands' logs: found, read, matched).

The names users imported from ``ringtrace.hostlog`` when it was one module stay importable here."""

from ringtrace.hostlog.parse import HostLogParser, is_log_only, log_only_run, parse_host_log

__all__ = ["HostLogParser", "is_log_only", "log_only_run", "parse_host_log"]
