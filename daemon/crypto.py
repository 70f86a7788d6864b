"""Secrets at rest: AES-256-GCM under a 32-byte key from the configuration.

    sealed = VERSION (1 byte) ‖ nonce (12 random bytes) ‖ ciphertext ‖ tag (16 bytes)

The associated data binds a ciphertext to its purpose and its row (for example
``b"webhook-secret:" + endpoint_id``): a sealed value copied to another row or
column does not open there. A random 96-bit nonce per seal is safe for far
more values than docex will ever store under one key (NIST SP 800-38D allows
2^32 random nonces per key).

`unseal` raises `SealError` for a wrong key, tampered bytes or the wrong
associated data; callers translate it at their seam.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from daemon.errors import DocexError

NONCE_BYTES = 12
# The first byte says how the rest was sealed, so the format can change without a migration.
VERSION = b"\x01"
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")


class SealError(DocexError):
    """A sealed value cannot be opened: wrong key, tampered bytes or wrong associated data."""


def key_from_hex(text: str) -> bytes:
    """The 32-byte key written as 64 hex characters (WEBHOOK_ENCRYPTION_KEY).

    Raises:
        ValueError: not exactly 64 hex characters.
    """
    if not _HEX_KEY.fullmatch(text):
        raise ValueError("an encryption key must be 64 hex characters (32 bytes)")
    return bytes.fromhex(text)


def seal(key: bytes, plaintext: bytes, *, associated_data: bytes) -> bytes:
    """Encrypt and authenticate `plaintext`, bound to `associated_data`."""
    nonce = os.urandom(NONCE_BYTES)
    return VERSION + nonce + AESGCM(key).encrypt(nonce, plaintext, associated_data)


def unseal(key: bytes, sealed: bytes, *, associated_data: bytes) -> bytes:
    """The plaintext of a value made by `seal` with the same key and associated data.

    Raises:
        SealError: the value does not open (see the module docstring).
    """
    if len(sealed) < 1 + NONCE_BYTES + 16 or sealed[:1] != VERSION:
        raise SealError("not a sealed value of a known version")
    nonce, body = sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
    try:
        return AESGCM(key).decrypt(nonce, body, associated_data)
    except InvalidTag:
        raise SealError("the sealed value does not open with this key and associated data") from None


def seal_json(key: bytes, value: Any, *, associated_data: bytes) -> bytes:
    """`seal` of `value` written as compact JSON (a document of credentials, a set of headers)."""
    return seal(key, json.dumps(value, separators=(",", ":")).encode("utf-8"),
                associated_data=associated_data)


def unseal_json(key: bytes, sealed: bytes, *, associated_data: bytes) -> Any:
    """The value `seal_json` sealed; raises `SealError` as `unseal` does."""
    return json.loads(unseal(key, bytes(sealed), associated_data=associated_data))
