"""The pure stages, in data-flow order: :mod:`.decode` (bytes -> records), :mod:`.pair` (records ->
scopes, peaks, open scopes), :mod:`.diagnose` (summary -> findings, wedge causes) and :mod:`.run` (all
three for one run of one file).  No I/O, no clock, no asyncio: the caller owns the bytes and the time."""
