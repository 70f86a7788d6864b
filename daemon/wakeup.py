"""A resettable wake-up call: a loop sleeps until its next due time or until `set`."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio


class Wakeup:
    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        """Wake the sleeper now (or make its next `sleep` return at once)."""
        self._event.set()

    async def sleep(self, seconds: float = math.inf) -> bool:
        """Sleep up to `seconds`; True if woken by `set`, False on timeout. Resets itself."""
        with trio.move_on_after(seconds):
            await self._event.wait()
        woken = self._event.is_set()
        if woken:
            self._event = trio.Event()
        return woken


async def wait_any(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as the first of `waits` returns; the others are cancelled."""
    async with trio.open_nursery() as nursery:

        async def first(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            nursery.cancel_scope.cancel()

        for wait in waits:
            nursery.start_soon(first, wait)
