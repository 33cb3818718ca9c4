"""The runtime's facts (``ringtrace.model.runtime``): accepted sizes, the error enum, amounts.

The accepted-size rules are the format doc's "Sizing facts": a task window is a power of two >= 4,
a dep pool >= 4, a heap >= 1 KiB (ringtrace rounds heaps to whole KiB).  ``accept`` and
``accept_below`` must agree with each other on every size: nothing accepted lies between them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ringtrace.model import runtime
from ringtrace.model.runtime import ERROR_CODES, RESOURCES, accept, accept_below, fmt_amount, usable


def accepted(resource: str, n: int) -> bool:
    """The rule of the format doc, written independently of ``accept``."""
    if resource == "task_window":
        return n >= 4 and n & (n - 1) == 0
    if resource == "heap":
        return n >= 1024 and n % 1024 == 0
    return n >= 4


@given(st.sampled_from(RESOURCES), st.integers(1, 1 << 34))
def test_accept_is_the_smallest_accepted_size_at_or_above(resource: str, n: int) -> None:
    up = accept(resource, n)
    assert up >= n and accepted(resource, up)
    assert not any(accepted(resource, k) for k in range(max(n, up - 4096), up))  # none smaller (near it)
    below = accept_below(resource, up)
    assert below is None or (below < n <= up and accepted(resource, below))


@given(st.sampled_from(RESOURCES), st.integers(1, 1 << 34))
def test_accept_below_is_the_largest_accepted_size_under(resource: str, n: int) -> None:
    below = accept_below(resource, n)
    if below is None:
        assert not any(accepted(resource, k) for k in range(1, min(n, 5000)))
        return
    assert below < n and accepted(resource, below)
    assert accept(resource, below + 1) >= n  # nothing accepted in (below, n)


def test_the_smallest_sizes_the_runtime_accepts() -> None:
    assert [accept(r, 1) for r in RESOURCES] == [4, 1024, 4]
    assert [accept_below(r, accept(r, 1)) for r in RESOURCES] == [None, None, None]
    assert accept("task_window", 5) == 8 and accept("heap", 3071) == 3072 and accept("dep_pool", 48.2) == 49


def test_a_task_window_of_n_holds_n_minus_one_tasks() -> None:
    assert usable("task_window", 8) == 7 and usable("heap", 8) == 8 and usable("dep_pool", 8) == 8


@pytest.mark.parametrize(("resource", "n", "text"), [
    ("heap", 512, "512 B"), ("heap", 1024, "1.0 KiB"), ("heap", 845 << 10, "845.0 KiB"),
    ("heap", 256 << 20, "256.0 MiB"), ("heap", 3 << 30, "3.0 GiB"), ("dep_pool", 48, "48"), ("task_window", 8, "8"),
])
def test_amounts_are_bytes_for_the_heap_and_counts_otherwise(resource: str, n: int, text: str) -> None:
    assert fmt_amount(resource, n) == text


def test_the_error_enum_orchestrator_and_scheduler_codes() -> None:
    assert sorted(ERROR_CODES) == [*range(12), *range(100, 105)]
    assert len({e.name for e in ERROR_CODES.values()}) == len(ERROR_CODES)  # names are unique
    fixable = {code: e.resource for code, e in ERROR_CODES.items() if e.resource}
    assert fixable == {1: "task_window", 2: "heap", 3: "task_window", 4: "dep_pool"}
    assert runtime.error_name(2) == "HEAP_RING_DEADLOCK" and runtime.error_name(42) is None
    assert runtime.error_name(None) is None and runtime.sizing_resource(100) is None
    assert runtime.describe_code(42) == "code 42 (not in the runtime's enum)"
    assert runtime.describe_code(4).startswith("4 DEP_POOL_OVERFLOW: ")


def test_compile_defaults_are_accepted_sizes() -> None:
    assert all(accepted(r, runtime.COMPILE_DEFAULTS[r]) for r in RESOURCES)
    assert set(runtime.CONFIG_KEYS) == set(RESOURCES) == set(runtime.COMPILE_DEFAULTS)


def test_each_resources_facts_live_in_one_row_and_the_old_tables_follow() -> None:
    """One :class:`~ringtrace.model.runtime.Resource` per resource; the dicts the code used are derived."""
    assert tuple(r.name for r in runtime.TABLE) == RESOURCES == ("task_window", "heap", "dep_pool")
    for r in runtime.TABLE:
        assert runtime.COMPILE_DEFAULTS[r.name] == r.compile_default and accepted(r.name, r.compile_default)
        assert runtime.CONFIG_KEYS[r.name] == r.config_key == f"ring_{r.name}"
        assert runtime.MIN_ACCEPTED[r.name] == r.floor == accept(r.name, 1)
        assert accept(r.name, r.floor + 1) % r.granule == 0
        assert (fmt_amount(r.name, 2048) == "2.0 KiB") == r.bytes
        assert usable(r.name, 8) == (7 if r.holds_one_less else 8)
    assert runtime.SINCE_VERSION == {"task_window": 4, "heap": 4, "dep_pool": 5}
