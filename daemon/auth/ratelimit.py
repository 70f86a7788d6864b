"""Fixed-window rate limits (SPEC §4).

Two stores, one policy (`window`):
- `shared_hit` counts in the database, so the public auth routes (login,
  register, refresh, schema convert) hold their limits across every process
  sharing a PostgreSQL database: these guard against password guessing and
  sign-up floods, which an attacker would otherwise spread over processes.
- `LocalLimiter` counts in memory, for the per-principal limit on every
  authenticated request: a database write per request would cost more than
  the requests it meters. With N processes a principal may make up to N times
  the limit; the limit is an abuse guard, not a quota (see README).
"""

from __future__ import annotations

import hashlib
import math
import random

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from daemon.config import RateLimit
from daemon.storage.tables import rate_limit_hits

# Stale windows are deleted now and then, by whichever request happens to draw this.
_CLEANUP_PROBABILITY = 0.01
_MAX_LOCAL_KEYS = 100_000
_KEY_CHARS: int = rate_limit_hits.c.key.type.length  # type: ignore[attr-defined]


def window(limit: RateLimit, now: float) -> tuple[int, int]:
    """(start of the current window, seconds until it ends), in whole seconds."""
    start = int(now // limit.period_s) * limit.period_s
    return start, max(1, math.ceil(start + limit.period_s - now))


def verdict(count: int, limit: RateLimit, now: float) -> int | None:
    """None if the `count`-th hit of this window is allowed, else Retry-After seconds."""
    return None if count <= limit.count else window(limit, now)[1]


def stored_key(key: str) -> str:
    """`key` as the database keeps it: a key longer than the column (a login's e-mail may be 254
    characters, folded longer still) becomes its SHA-256, which PostgreSQL would otherwise refuse
    ("value too long": a 500 for every login of such an account) and SQLite store whole."""
    if len(key) <= _KEY_CHARS:
        return key
    name, _, subject = key.partition(":")
    return f"{name}:sha256:{hashlib.sha256(subject.encode()).hexdigest()}"


def shared_hit(conn: Connection, key: str, limit: RateLimit, now: float) -> int | None:
    """Count one hit for `key` in the database; returns Retry-After seconds when over."""
    start, _ = window(limit, now)
    key = stored_key(key)
    insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(rate_limit_hits)
    statement = (
        insert.values(key=key, window_start=start, count=1)
        .on_conflict_do_update(index_elements=["key", "window_start"],
                               set_={"count": rate_limit_hits.c.count + 1})
        .returning(rate_limit_hits.c.count)
    )
    count = conn.execute(statement).scalar_one()
    if random.random() < _CLEANUP_PROBABILITY:
        conn.execute(rate_limit_hits.delete().where(rate_limit_hits.c.window_start < now - 86400))
    return verdict(count, limit, now)


class LocalLimiter:
    """In-process fixed windows keyed by string."""

    def __init__(self) -> None:
        self._windows: dict[str, tuple[int, int]] = {}

    def hit(self, key: str, limit: RateLimit, now: float) -> int | None:
        start, _ = window(limit, now)
        seen_start, count = self._windows.get(key, (start, 0))
        count = count + 1 if seen_start == start else 1
        if len(self._windows) >= _MAX_LOCAL_KEYS and key not in self._windows:
            self._prune(now)
        self._windows[key] = (start, count)
        return verdict(count, limit, now)

    def _prune(self, now: float) -> None:
        # Windows are at most a day long in practice; anything older is dead weight.
        self._windows = {k: v for k, v in self._windows.items() if v[0] > now - 86400}
