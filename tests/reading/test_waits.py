"""The app's waits: the byte bound (``InFlight``) and ``wait_any``.

Whether an ``acquire`` waits is asked with ``asyncio.timeout(0)``: its cancellation is queued before the
acquire runs, so it fires only if the acquire suspends (a full budget); one with room returns first."""

from __future__ import annotations

import asyncio

import pytest

from ringtrace.reading.waits import InFlight, wait_any

DEADLINE = 10.0
"""Against hanging only."""


async def admitted_at_once(flight: InFlight, n: int) -> bool:
    """Whether ``acquire(n)`` returns without waiting (a waiting one is cancelled, the level left as it was)."""
    try:
        async with asyncio.timeout(0):
            await flight.acquire(n)
    except TimeoutError:
        return False
    return True


def test_the_bound_admits_up_to_its_limit_and_one_item_whatever_its_size() -> None:
    async def body() -> None:
        flight = InFlight(100)
        assert await admitted_at_once(flight, 150)  # empty: one item larger than the limit gets in
        assert not await admitted_at_once(flight, 1)
        assert flight.level == 150
        await flight.release(150)
        assert await admitted_at_once(flight, 60) and await admitted_at_once(flight, 40)  # 100: the limit
        assert not await admitted_at_once(flight, 1)
        flight.add(30)  # counted without waiting (events of bytes already held)
        assert (flight.level, flight.peak) == (130, 150)

    asyncio.run(body())


def test_a_release_lets_a_waiting_acquire_in() -> None:
    async def body() -> None:
        flight = InFlight(100)
        await flight.acquire(80)
        waiting = asyncio.create_task(flight.acquire(80))
        await flight.release(80)
        async with asyncio.timeout(DEADLINE):
            await waiting
        assert (flight.level, flight.peak) == (80, 80)

    asyncio.run(body())


@pytest.mark.parametrize("already", [False, True])
@pytest.mark.parametrize("which", [0, 1])
def test_wait_any_returns_once_one_event_is_set(which: int, already: bool) -> None:
    async def body() -> None:
        events = [asyncio.Event(), asyncio.Event()]
        if already:
            events[which].set()
        waiting = asyncio.create_task(wait_any(*events))
        events[which].set()
        done, _ = await asyncio.wait([waiting], timeout=DEADLINE)
        assert done == {waiting}, f"wait_any still waiting {DEADLINE}s after event {which} was set"

    asyncio.run(body())
