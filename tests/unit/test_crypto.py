"""AES-256-GCM sealing of secrets at rest (daemon.crypto)."""

from __future__ import annotations

import secrets

import pytest

from daemon.crypto import SealError, key_from_hex, seal, unseal

KEY = secrets.token_bytes(32)
AD = b"webhook-secret:01jd3m2a4c6e8g0j2m4p6r8t0v"


def test_a_sealed_value_opens_with_the_same_key_and_associated_data() -> None:
    sealed = seal(KEY, b"whsec_abc", associated_data=AD)
    assert unseal(KEY, sealed, associated_data=AD) == b"whsec_abc"
    assert b"whsec_abc" not in sealed and len(sealed) == 1 + 12 + 9 + 16


def test_each_seal_uses_a_fresh_nonce() -> None:
    assert seal(KEY, b"x", associated_data=AD) != seal(KEY, b"x", associated_data=AD)


@pytest.mark.parametrize("change", ["key", "associated_data", "byte", "version", "short"])
def test_anything_else_does_not_open(change: str) -> None:
    sealed = seal(KEY, b"whsec_abc", associated_data=AD)
    key, ad = KEY, AD
    if change == "key":
        key = secrets.token_bytes(32)
    elif change == "associated_data":
        ad = b"webhook-secret:another-row"
    elif change == "byte":
        sealed = sealed[:-1] + bytes([sealed[-1] ^ 1])
    elif change == "version":
        sealed = b"\x02" + sealed[1:]
    else:
        sealed = sealed[:20]
    with pytest.raises(SealError):
        unseal(key, sealed, associated_data=ad)


def test_keys_are_64_hex_characters() -> None:
    assert key_from_hex("ab" * 32) == b"\xab" * 32
    for bad in ("ab" * 31, "zz" * 32, "ab" * 33, ""):
        with pytest.raises(ValueError, match="64 hex"):
            key_from_hex(bad)
