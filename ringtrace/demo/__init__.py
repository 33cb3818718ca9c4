"""The built-in example: :mod:`.sim`, a simulator of the runtime's rings writing real-format files and host
logs (``ringtrace demo``, :mod:`ringtrace.cli.demo`, writes build trees with it live and follows them)."""
