"""Signing secrets and the X-Webhook-Signature header, as Stripe does it (pure).

    X-Webhook-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>]
    v1 = lowercase hex HMAC-SHA256(key = UTF-8 bytes of the signingSecret string,
                                   message = b"<t>." + the exact body bytes sent)

The key is the secret string exactly as the client received it (``whsec_…``,
not base64-decoded), so Stripe's own verifiers accept every delivery. During
a rotation's overlap a second v1 made with the previous secret follows the
first; a verifier accepts a header if any v1 matches.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_signing_secret() -> str:
    """``whsec_`` + 32 random bytes in standard base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """One v1 value: the hex HMAC-SHA256 of ``b"<timestamp>." + body`` under `secret`."""
    return hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(signing_secrets: Sequence[str], timestamp: int, body: bytes) -> str:
    """The header value: ``t=…`` then one ``v1=…`` per secret, the current one first.

    Raises:
        ValueError: no secret given.
    """
    if not signing_secrets:
        raise ValueError("at least one signing secret is needed")
    return ",".join([f"t={timestamp}", *(f"v1={signature(s, timestamp, body)}" for s in signing_secrets)])


def verify(header: str, body: bytes, secret: str, *, now: int, tolerance_s: int = 300) -> bool:
    """What a receiver does: any v1 matches in constant time and t is within `tolerance_s` of `now`."""
    parts = [item.split("=", 1) for item in header.split(",") if "=" in item]
    stamps = [v for k, v in parts if k == "t"]
    if len(stamps) != 1 or not stamps[0].isdigit():
        return False
    timestamp = int(stamps[0])
    if abs(now - timestamp) > tolerance_s:
        return False
    expected = signature(secret, timestamp, body)
    return any(hmac.compare_digest(expected, v) for k, v in parts if k == "v1")
