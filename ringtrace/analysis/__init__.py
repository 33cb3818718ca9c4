"""Analyses over the facts, pure functions: :mod:`.advise` (ring sizing from every run of a program)
and :mod:`.diff` (what changed between two runs)."""
