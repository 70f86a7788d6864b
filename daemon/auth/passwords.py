"""bcrypt password hashes, computed in threads so the event loop never stalls.

bcrypt reads at most 72 bytes of a password; longer ones are refused at
validation (`MAX_PASSWORD_BYTES`) instead of being silently truncated.
"""

from __future__ import annotations

import functools
import os

import bcrypt
import trio

MAX_PASSWORD_BYTES = 72
# Hashing is CPU-bound: never more at once than there are cores.
_cpu = trio.CapacityLimiter(max(1, os.cpu_count() or 1))


async def hash_password(password: str, rounds: int) -> str:
    salt = bcrypt.gensalt(rounds)
    hashed = await trio.to_thread.run_sync(bcrypt.hashpw, password.encode(), salt, limiter=_cpu)
    return hashed.decode()


async def verify_password(password: str, hashed: str | None, rounds: int) -> bool:
    """Check `password` against `hashed`; with no hash (unknown account) check against a
    dummy of the same cost, so both answers take the same time."""

    candidate = password.encode()
    # bcrypt refuses more than 72 bytes; no stored password is longer (registration
    # refuses them), so such a candidate is wrong, found in the usual time.
    fits = len(candidate) <= MAX_PASSWORD_BYTES

    def check() -> bool:
        target = (hashed or _dummy_hash(rounds)).encode()
        return bcrypt.checkpw(candidate[:MAX_PASSWORD_BYTES], target)

    ok = await trio.to_thread.run_sync(check, limiter=_cpu)
    return ok and fits and hashed is not None


def needs_rehash(hashed: str, rounds: int) -> bool:
    """Whether `hashed` was made at another cost than `rounds` (the setting changed since):
    rehashed at the next login, so that a raised cost protects every account in time."""
    try:
        return int(hashed.split("$")[2]) != rounds
    except (IndexError, ValueError):
        return False


@functools.cache
def _dummy_hash(rounds: int) -> str:
    return bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(rounds)).decode()
