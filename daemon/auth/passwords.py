"""bcrypt password hashes, computed in threads so the event loop never stalls.

A password is hashed and checked in its NFKC form (`normalized`), so that it is the
same password whichever keyboard or system typed it. bcrypt reads at most 72 bytes
of it; longer ones are refused at validation (`MAX_PASSWORD_BYTES`) instead of being
silently truncated.
"""

from __future__ import annotations

import functools
import os
import unicodedata

import bcrypt
import trio

MAX_PASSWORD_BYTES = 72
# Hashing is CPU-bound: never more at once than there are cores.
_cpu = trio.CapacityLimiter(max(1, os.cpu_count() or 1))


def normalized(password: str) -> str:
    """`password` in Unicode's NFKC form (NIST SP 800-63B 5.1.1.2): "é" typed as one
    character on one system and as "e" and an accent on another, or a full-width letter
    from an East Asian keyboard, is the same password."""
    return unicodedata.normalize("NFKC", password)


async def hash_password(password: str, rounds: int) -> str:
    salt = bcrypt.gensalt(rounds)
    hashed = await trio.to_thread.run_sync(bcrypt.hashpw, normalized(password).encode(), salt, limiter=_cpu)
    return hashed.decode()


async def verify_password(password: str, hashed: str | None, rounds: int) -> bool:
    """Check `password` against `hashed`; with no hash (unknown account) check against a
    dummy of the same cost, so both answers take the same time.

    A hash made before passwords were normalized holds the password as it was typed:
    when the normalized form does not match, the typed one is tried too, against the
    dummy as well (a second check for known accounts only told them apart by time)."""
    target = (hashed or _dummy_hash(rounds)).encode()
    forms = [normalized(password)]
    if password != forms[0]:
        forms.append(password)

    def check(form: str) -> bool:
        candidate = form.encode()
        # bcrypt refuses more than 72 bytes; no stored password is longer (registration
        # refuses them), so such a candidate is wrong, found in the usual time.
        return bcrypt.checkpw(candidate[:MAX_PASSWORD_BYTES], target) and len(candidate) <= MAX_PASSWORD_BYTES

    for form in forms:
        if await trio.to_thread.run_sync(check, form, limiter=_cpu):
            return hashed is not None
    return False


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
