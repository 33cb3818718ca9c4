"""The real scope_stats files the runtime wrote (``tests/fixtures/samples``), by name.

Paths only: reading them is the test's business.  ``SAMPLE_FILES`` is every scope_stats file of
the tree as the product's own discovery finds it (8 files; two failed runs are known only from
their ``host.log``).  :func:`beyond_total` is NESTED promising fewer records than it holds.
:func:`real_files` is every distinct file the runtime wrote that the checkout can see.
"""

from __future__ import annotations

import json
from pathlib import Path

from ringtrace.sources.paths import find_sources

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "samples"
FAILED = SAMPLES / "failed"
L3 = SAMPLES / "build_output" / "nested_l3_20261130_102011"
"""A multi-rank (L3) run: ``dfx_outputs/rank0/d0`` and ``rank1/d1``."""

SMALL = SAMPLES / "outputs/TestScopeStats_default_20261130_101210/scope_stats/scope_stats.jsonl"
NESTED = SAMPLES / "outputs/NestedScopes_small_20261130_101702/scope_stats/scope_stats.jsonl"
PAGED = SAMPLES / "outputs/TestPagedAttention_big16x2048_tight_20261130_101530/scope_stats/scope_stats.jsonl"
BGEMM = SAMPLES / "outputs/TestBenchmarkBgemm_Case0_20261130_101845/scope_stats/scope_stats.jsonl"
FLOW = FAILED / "NestedScopes_window4_flow_control_deadlock/dfx_outputs/scope_stats/scope_stats.jsonl"
"""A wedged run (window 4, flow-control deadlock) with its ``host.log`` two folders up."""

SAMPLE_FILES: list[Path] = find_sources([str(SAMPLES)])[0]

_ROOT = Path(__file__).resolve().parents[2]
SHARED = _ROOT.parent / "shared" / "samples"
"""The runtime's files beside the checkout, where there are any."""


def real_files() -> list[Path]:
    """Every scope_stats file (``*.jsonl``) in the repository's fixtures and golden cases, and the shared
    samples: one path per distinct content, sorted."""
    seen: dict[bytes, Path] = {}
    for root in (SAMPLES.parent, _ROOT / "tests" / "golden", SHARED):
        for path in sorted(root.rglob("*.jsonl")) if root.is_dir() else []:
            seen.setdefault(path.read_bytes(), path)
    return sorted(seen.values())


def beyond_total(extra: int) -> tuple[bytes, int]:
    """NESTED with ``total`` lowered by ``extra``: the file holds ``extra`` records more than it promises.
    Returns the bytes and where the promised records end."""
    lines = NESTED.read_bytes().splitlines(keepends=True)
    meta = json.loads(lines[0])
    meta["total"] -= extra
    head = json.dumps(meta).encode() + b"\n"
    return head + b"".join(lines[1:]), len(head) + sum(len(x) for x in lines[1:1 + meta["total"]])
