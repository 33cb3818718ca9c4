"""The trace layout (:mod:`ringtrace.sinks.perfetto._layout`): a rank's pid fits Perfetto's int32."""

from __future__ import annotations

import pytest

from ringtrace.sinks.perfetto import _layout as layout


@pytest.mark.parametrize(("rank", "pid"), [
    ("0", 1), ("7", 8), (str(layout.PID_MAX - 1), layout.PID_MAX), (str(layout.PID_MAX), 1),
    ("9" * 30, 1 + int("9" * 30) % layout.PID_MAX), ("", 1), ("x1", 1), ("\u00b2", 1),
])
def test_rank_pid_fits_perfettos_int32(rank: str, pid: int) -> None:
    assert layout.rank_pid(rank) == pid and 1 <= pid <= layout.PID_MAX
