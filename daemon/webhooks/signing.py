"""Signing secrets and the X-Webhook-Signature header, as Stripe does it; the receivers' check.

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
import time
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


class SignatureVerificationError(ValueError):
    """A delivery's signature does not prove it came from docex; the message says why."""


def verify_signature(payload: bytes | str, header: str | None, secret: str, *, tolerance_s: int | None = 300,
                     now: float | None = None) -> None:
    """Check a delivery as a Python receiver does, accepting exactly what Stripe's
    `stripe.WebhookSignature.verify_header(payload, header, secret, tolerance=300)` accepts.

        from daemon.webhooks.signing import SignatureVerificationError, verify_signature

        try:
            verify_signature(request_body_bytes, request.headers["X-Webhook-Signature"], SECRET)
        except SignatureVerificationError:
            return 400

    Args:
        payload: the request body exactly as received (bytes, or the same decoded as UTF-8).
        header: the X-Webhook-Signature value, ``t=<unix seconds>,v1=<hex>[,v1=<hex>]``.
        secret: the endpoint's signing secret (``whsec_…``) as docex showed it.
        tolerance_s: refuse a signature made more than this many seconds ago (a replayed
            capture); None does not check its age. As Stripe's, a time ahead is not refused.
        now: the current Unix time (defaults to the clock).

    Raises:
        SignatureVerificationError: no header or secret, a header without ``t`` or ``v1``, no
            ``v1`` matching the body under `secret`, or a signature older than `tolerance_s`.
    """
    if not header:
        raise SignatureVerificationError("no signature header")
    if not secret or not secret.strip():
        raise SignatureVerificationError("no signing secret")
    pairs = [item.split("=", 2) for item in header.split(",")]
    try:
        timestamp = int(next(pair[1] for pair in pairs if pair[0] == "t"))
    except (StopIteration, IndexError, ValueError):
        raise SignatureVerificationError("the header has no timestamp t=<unix seconds>") from None
    candidates = [pair[1] for pair in pairs if pair[0] == "v1" and len(pair) > 1]
    if not candidates:
        raise SignatureVerificationError("the header has no v1 signature")
    body = payload.encode("utf-8") if isinstance(payload, str) else bytes(payload)
    expected = signature(secret, timestamp, body)
    if not any(hmac.compare_digest(expected.encode(), candidate.encode()) for candidate in candidates):
        raise SignatureVerificationError("no v1 signature matches the body under this secret")
    current = time.time() if now is None else now
    if tolerance_s and timestamp < current - tolerance_s:
        raise SignatureVerificationError(f"the signature is older than {tolerance_s} s (t={timestamp})")
