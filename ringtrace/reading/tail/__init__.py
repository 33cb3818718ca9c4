"""Following files as they are written: ``discover`` (which files), ``follower`` (one file),
``tailer`` (all files, driven by change notifications and ticks), ``state`` (restart state).

Everything here is synchronous and takes the time as an argument; ``ringtrace.reading.app`` runs it
from asyncio (file reads in a worker thread) and owns the clock.
"""
