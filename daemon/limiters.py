"""A capacity limiter per key (a user, say), so one key's waiting never holds another's turn."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio


class KeyedLimiter:
    """`tokens` at once per key; a key's limiter is dropped once nobody holds or waits for it,
    so the keys seen over time are not kept."""

    def __init__(self, tokens: int) -> None:
        self._tokens = tokens
        self._limiters: dict[str, trio.CapacityLimiter] = {}

    def __len__(self) -> int:
        """How many keys hold or wait for a token now."""
        return len(self._limiters)

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        limiter = self._limiters.setdefault(key, trio.CapacityLimiter(self._tokens))
        try:
            async with limiter:
                yield
        finally:
            held = limiter.statistics()
            if not held.borrowed_tokens and not held.tasks_waiting and self._limiters.get(key) is limiter:
                del self._limiters[key]
