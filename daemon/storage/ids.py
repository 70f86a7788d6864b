"""Identifiers: 26-character ULIDs (Crockford base32, lower case).

They sort by creation time (strictly, for ids made by one process), so
``ORDER BY id DESC`` is "newest first" and a keyset cursor is just the last id seen.
"""

from __future__ import annotations

import secrets
import threading
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


_last = 0
_lock = threading.Lock()


def new_id() -> str:
    """A new id, greater than every id this process made before (also within one
    millisecond: the random part is then the previous one plus one)."""
    global _last
    with _lock:
        value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
        if value <= _last:
            value = _last + 1
        _last = value
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def looks_like_id(text: str) -> bool:
    return len(text) == 26 and all(c in _ALPHABET for c in text)
