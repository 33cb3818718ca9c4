"""What the app's tasks wait on: room in the byte bound (:class:`InFlight`) and the first of several
events (:func:`wait_any`).  Both live in the running event loop; neither reads a clock."""

from __future__ import annotations

import asyncio


class InFlight:
    """Bytes handed on but not yet delivered.  ``acquire`` waits while adding would pass ``limit``
    (an empty budget always admits one item, so an item larger than the limit cannot deadlock)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.level = 0
        self.peak = 0
        self._room = asyncio.Condition()

    async def acquire(self, n: int) -> None:
        async with self._room:
            await self._room.wait_for(lambda: self.level == 0 or self.level + n <= self.limit)
            self.level += n
            self.peak = max(self.peak, self.level)

    def add(self, n: int) -> None:
        """Count ``n`` more without waiting (the events of a slice whose bytes are already held)."""
        self.level += n
        self.peak = max(self.peak, self.level)

    async def release(self, n: int) -> None:
        async with self._room:
            self.level -= n
            self._room.notify_all()


async def wait_any(*events: asyncio.Event) -> None:
    """Return once one of ``events`` is set (at once when one already is)."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
