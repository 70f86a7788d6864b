"""Identifiers: 26-character ULIDs (Crockford base32, lower case).

They sort by creation time to the millisecond, so ``ORDER BY id DESC`` is
"newest first" and a keyset cursor is just the last id seen.
"""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def new_id() -> str:
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return "".join(reversed(chars))


def looks_like_id(text: str) -> bool:
    return len(text) == 26 and all(c in _ALPHABET for c in text)
