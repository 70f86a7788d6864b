"""Signatures (daemon.webhooks.signing), checked with Stripe's own verifier."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest
import stripe

from daemon.webhooks.bodies import encode
from daemon.webhooks.signing import new_signing_secret, signature, signature_header, verify

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
    assert verify(header, body, secret, now=now)


def test_two_signatures_during_a_rotation_and_stripe_accepts_either_secret() -> None:
    new, old = new_signing_secret(), new_signing_secret()
    now = int(time.time())
    header = signature_header([new, old], now, BODY)
    t, v1_new, v1_old = header.split(",")
    assert t == f"t={now}" and v1_new.startswith("v1=") and v1_old.startswith("v1=")
    for secret in (new, old):
        assert stripe.WebhookSignature.verify_header(BODY, header, secret, tolerance=300)
        assert verify(header, BODY, secret, now=now)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY, header, new_signing_secret(), tolerance=300)


def test_a_changed_body_or_an_old_timestamp_is_refused() -> None:
    secret = new_signing_secret()
    now = int(time.time())
    header = signature_header([secret], now, BODY)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY + b" ", header, secret, tolerance=300)
    assert not verify(header, BODY + b" ", secret, now=now)
    stale = signature_header([secret], now - 600, BODY)
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.WebhookSignature.verify_header(BODY, stale, secret, tolerance=300)
    assert not verify(stale, BODY, secret, now=now)
    assert not verify("v1=abc", BODY, secret, now=now)


def test_no_secret_is_an_error() -> None:
    with pytest.raises(ValueError, match="at least one"):
        signature_header([], 1, BODY)
