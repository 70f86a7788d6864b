"""Signatures (daemon.webhooks.signing), checked with Stripe's own verifier."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest
import stripe

from daemon.webhooks.bodies import encode
from daemon.webhooks.signing import (
    SignatureVerificationError,
    new_signing_secret,
    signature,
    signature_header,
    verify_signature,
)

BODY = '{"id":"evt_1","type":"job.completed","data":{"job":{"fileName":"Rechnung-Ä.pdf"}},"occurredAt":"x"}'.encode()


def test_a_secret_is_whsec_and_32_random_bytes_in_base64() -> None:
    secret = new_signing_secret()
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert new_signing_secret() != secret


def test_the_key_is_the_secret_string_itself_and_the_message_is_t_dot_body() -> None:
    secret = new_signing_secret()
    expected = hmac.new(secret.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert signature(secret, 1700000000, BODY) == expected
    assert signature_header([secret], 1700000000, BODY) == f"t=1700000000,v1={expected}"


@pytest.mark.parametrize("fmt", ["JSON", "XML", "FORM_URLENCODED"])
def test_stripe_accepts_every_body_format(fmt: str) -> None:
    secret = new_signing_secret()
    body = encode({"id": "evt_1", "type": "job.queued", "data": {"job": {"name": "café & co <b>"}},
                   "occurredAt": "2026-01-01T00:00:00.000Z"}, fmt)
    now = int(time.time())
    header = signature_header([secret], now, body)
    assert stripe.WebhookSignature.verify_header(body, header, secret, tolerance=300)
    verify_signature(body, header, secret, now=now)


def test_two_signatures_during_a_rotation_and_stripe_accepts_either_secret() -> None:
    new, old = new_signing_secret(), new_signing_secret()
    now = int(time.time())
    header = signature_header([new, old], now, BODY)
    t, v1_new, v1_old = header.split(",")
    assert t == f"t={now}" and v1_new.startswith("v1=") and v1_old.startswith("v1=")
    for secret in (new, old):
        assert stripe.WebhookSignature.verify_header(BODY, header, secret, tolerance=300)
        verify_signature(BODY, header, secret, now=now)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY, header, new_signing_secret(), tolerance=300)


def test_a_changed_body_or_an_old_timestamp_is_refused() -> None:
    secret = new_signing_secret()
    now = int(time.time())
    header = signature_header([secret], now, BODY)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY + b" ", header, secret, tolerance=300)
    with pytest.raises(SignatureVerificationError, match="no v1 signature matches"):
        verify_signature(BODY + b" ", header, secret, now=now)
    stale = signature_header([secret], now - 600, BODY)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY, stale, secret, tolerance=300)
    with pytest.raises(SignatureVerificationError, match="older than 300 s"):
        verify_signature(BODY, stale, secret, now=now)
    with pytest.raises(SignatureVerificationError, match="no timestamp"):
        verify_signature(BODY, "v1=abc", secret, now=now)


def test_no_secret_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        signature_header([], 1, BODY)


def _cases(secret: str, now: int) -> list[tuple[str, bytes | str, str | None, str]]:
    """(name, payload, header, secret) for the agreement test: valid ones and every way to be wrong."""
    good = signature_header([secret], now, BODY)
    v1 = signature(secret, now, BODY)
    return [
        ("valid", BODY, good, secret),
        ("valid, the body as text", BODY.decode(), good, secret),
        ("valid, a second secret's v1 first", BODY,
         signature_header([new_signing_secret(), secret], now, BODY), secret),
        ("signed in the future", BODY, signature_header([secret], now + 3600, BODY), secret),
        ("v1 before t", BODY, f"v1={v1},t={now}", secret),
        ("an unknown scheme beside v1", BODY, f"t={now},v0=abc,v1={v1}", secret),
        ("another body", BODY + b"x", good, secret),
        ("another secret", BODY, good, new_signing_secret()),
        ("the secret decoded", BODY, good, base64.b64decode(secret.removeprefix("whsec_")).hex()),
        ("too old", BODY, signature_header([secret], now - 301, BODY), secret),
        ("no header", BODY, "", secret),
        ("no header at all", BODY, None, secret),
        ("no t", BODY, f"v1={v1}", secret),
        ("t not a number", BODY, f"t=soon,v1={v1}", secret),
        ("no v1", BODY, f"t={now}", secret),
        ("v1 upper case", BODY, f"t={now},v1={v1.upper()}", secret),
        ("garbage", BODY, "t", secret),
        ("no secret", BODY, good, " "),
    ]


def test_verify_signature_accepts_exactly_what_stripe_accepts() -> None:
    secret = new_signing_secret()
    now = int(time.time())
    for name, payload, header, key in _cases(secret, now):
        try:
            stripe.WebhookSignature.verify_header(payload, header, key, tolerance=300)
            stripe_accepts = True
        except stripe.SignatureVerificationError:
            stripe_accepts = False
        try:
            verify_signature(payload, header, key)
            ours_accepts = True
        except SignatureVerificationError:
            ours_accepts = False
        assert ours_accepts == stripe_accepts, name
        assert ours_accepts == name.startswith(("valid", "signed in the future", "v1 before t", "an unknown")), name


def test_a_non_ascii_signature_is_refused_not_a_crash() -> None:
    # (Stripe's verifier raises TypeError from hmac.compare_digest here; a receiver wants a refusal.)
    secret = new_signing_secret()
    now = int(time.time())
    forged = f"t={now},v1=é{signature(secret, now, BODY)[1:]}"
    with pytest.raises(SignatureVerificationError):
        verify_signature(BODY, forged, secret)
