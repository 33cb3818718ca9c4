"""Following files as they are written: ``discover`` (which files), ``follower`` (one file),
``tailer`` (all files, driven by change notifications and ticks), ``hostlogs`` (a run's host log,
found and read at its finish), ``state`` (restart state), and ``inotify`` (the tree watcher).

All but ``inotify`` is synchronous and takes the time as an argument; the app runs it on its reader
thread (``ringtrace.reading.reader_task``) and owns the clock.  ``inotify.TreeWatcher`` lives on the event loop and
hands its directory walks to a thread (its docstring says which).  Each class's docstring states
who calls it, on which thread, and who owns what.
"""
