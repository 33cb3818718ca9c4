"""Deprecated: the records live in :mod:`ringtrace.model.records` (this alias goes in the next release)."""

import warnings

from ringtrace.analysis.diff import RingDiff, RingSide, RunDiff, TreeDiff  # noqa: F401  (defined with the diff now)
from ringtrace.model.records import *  # noqa: F403

warnings.warn("ringtrace.records moved to ringtrace.model.records", DeprecationWarning, stacklevel=2)
