"""Deprecated: the simulator lives in :mod:`ringtrace.demo.sim` (this alias goes in the next release)."""

import warnings

from ringtrace.demo.sim import *  # noqa: F403

warnings.warn("ringtrace.sim moved to ringtrace.demo.sim", DeprecationWarning, stacklevel=2)
