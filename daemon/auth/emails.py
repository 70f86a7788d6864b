"""The one key of an e-mail address: what makes two spellings the same account.

An account is unique by `email_key` and found by it at login, so every spelling
that reads as the same address reaches the same account: the local part in NFKC
form and case-folded (the Kelvin sign ``\\u212a`` and the fullwidth ``ｋ`` are
``k``; ``ß`` is ``ss``), the domain as IDNA/UTS-46 ASCII in lower case
(``bücher.de``, ``BÜCHER.de`` and ``xn--bcher-kva.de`` are one domain; the
``idna`` library is the one email-validator uses).

`look_alike` is why registration refuses an address that NFKC changes: without
it, someone could register ``\\u212aate@example.com`` first and hold the key of
``kate@example.com``, locking the real Kate out (409) with an address that
merely looks like hers. A plain-written address always passes.
"""

from __future__ import annotations

import unicodedata

import idna

# The users.email_key column; a key that cannot fit belongs to no account.
MAX_KEY_LENGTH = 320


def email_key(address: str) -> str:
    """The key `address` is unique and looked up by (see the module docstring)."""
    local, _, domain = address.strip().rpartition("@")
    # casefold can leave a form NFKC would change again (and NFKC a form casefold would): both, twice.
    local = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", local).casefold())
    try:
        domain = idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError:  # not a domain IDNA accepts (registration refuses those): folded like the local part
        domain = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", domain).casefold())
    return f"{local}@{domain.lower()}"


def look_alike(address: str) -> str | None:
    """The plain form of `address` if it is written with compatibility characters (the
    Kelvin sign, fullwidth letters, ligatures), else None."""
    plain = unicodedata.normalize("NFKC", address.strip())
    return plain if plain != address.strip() else None
