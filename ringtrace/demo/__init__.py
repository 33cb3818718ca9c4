"""The built-in example: :mod:`.sim` (a simulator of the runtime's rings writing real-format files and
host logs) and :mod:`.run` (``ringtrace demo``: writes build trees live and follows them)."""

from ringtrace.demo.run import run_demo

__all__ = ["run_demo"]
