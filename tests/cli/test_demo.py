"""``ringtrace demo`` end to end: the simulator writes live, the watch service follows every file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # runs the demo process


def test_demo_follows_every_simulated_run(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "ringtrace", "demo", "--pace", "0", "--dir", str(tmp_path),
                           "--metrics-addr", "127.0.0.1:0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "5 of 5 runs followed to their end, 1 wedged" in proc.stdout
    assert "metrics: http://127.0.0.1:" in proc.stdout
    assert "HEAP_RING_DEADLOCK" in proc.stdout
    files = sorted(tmp_path.rglob("scope_stats.jsonl"))
    assert len(files) == 5
    assert len(list((tmp_path / "traces").glob("*.pftrace"))) == 5
    check = subprocess.run([sys.executable, "-m", "ringtrace", "check", str(tmp_path)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 1 and "wedged in moe_layer_orch.cpp" in check.stdout
