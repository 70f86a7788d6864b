"""The pure half of the OAuth flow (daemon/integrations/oauth.py): signed states, the
authorization URL, token answers and when to refresh. Every time is passed in."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import urllib.parse

import pytest

from daemon.errors import PermanentJobError, TransientJobError
from daemon.integrations.oauth import (
    REFRESH_MARGIN_S,
    STATE_TTL_S,
    InvalidState,
    Tokens,
    authorization_url,
    missing_scopes,
    needs_refresh,
    pkce_challenge,
    pkce_verifier,
    sign_state,
    state_key,
    token_error,
    tokens_from_response,
    verify_state,
)

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.UTC)
KEY = state_key("a-jwt-secret-of-at-least-thirty-two-characters")


def _state(**kw: object) -> str:
    args: dict[str, object] = {"user_id": "u1", "integration_id": "i1", "nonce": "n1", "now": NOW} | kw
    return sign_state(KEY, **args)  # type: ignore[arg-type]


def test_a_state_round_trips_until_it_expires() -> None:
    state = _state()
    claim = verify_state(KEY, state, NOW + dt.timedelta(seconds=STATE_TTL_S - 1))
    assert (claim.user_id, claim.integration_id, claim.nonce) == ("u1", "i1", "n1")
    assert claim.expires_at == NOW + dt.timedelta(seconds=STATE_TTL_S)
    with pytest.raises(InvalidState, match="expired"):
        verify_state(KEY, state, NOW + dt.timedelta(seconds=STATE_TTL_S))
    short = _state(ttl_s=5)
    with pytest.raises(InvalidState, match="expired"):
        verify_state(KEY, short, NOW + dt.timedelta(seconds=5))


def test_the_key_is_derived_for_this_purpose_only() -> None:
    secret = "a-jwt-secret-of-at-least-thirty-two-characters"
    assert state_key(secret) != secret.encode() and len(state_key(secret)) == 32
    assert state_key(secret) == KEY and state_key(secret + "x") != KEY


def test_forged_or_altered_states_are_refused() -> None:
    state = _state()
    body, mac = state.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    other = base64.urlsafe_b64encode(json.dumps({**payload, "u": "u2"}).encode()).decode().rstrip("=")
    for forged, reason in [
        (f"{other}.{mac}", "signature"),                       # another user, the old signature
        (_state().replace(".", ".A", 1), "signature|malformed"),  # a flipped signature
        (sign_state(state_key("another-secret-of-thirty-two-characters!"), user_id="u1", integration_id="i1",
                    nonce="n1", now=NOW), "signature"),
        ("", "malformed"),
        ("no-dot", "malformed"),
        (".", "malformed"),
        ("!!!.???", "malformed|signature"),
        ("a" * 2000 + ".b", "malformed"),
    ]:
        with pytest.raises(InvalidState, match=reason):
            verify_state(KEY, forged, NOW)
    # A well-signed payload of the wrong shape.
    import hashlib
    import hmac

    bad_body = base64.urlsafe_b64encode(b'{"u": 1}').decode().rstrip("=")
    bad_mac = base64.urlsafe_b64encode(hmac.new(KEY, b"docex-oauth-state." + bad_body.encode(),
                                                hashlib.sha256).digest()).decode().rstrip("=")
    with pytest.raises(InvalidState, match="malformed"):
        verify_state(KEY, f"{bad_body}.{bad_mac}", NOW)


def test_the_authorization_url_asks_for_an_offline_grant() -> None:
    url = authorization_url("https://accounts.example/o/auth", client_id="cid", redirect_url="https://d/cb",
                            scopes=["s1", "s2"], state="st", code_challenge="ch")
    parts = urllib.parse.urlsplit(url)
    assert parts.netloc == "accounts.example" and parts.path == "/o/auth"
    assert dict(urllib.parse.parse_qsl(parts.query)) == {
        "response_type": "code", "client_id": "cid", "redirect_uri": "https://d/cb", "scope": "s1 s2",
        "state": "st", "access_type": "offline", "prompt": "consent", "include_granted_scopes": "true",
        "code_challenge": "ch", "code_challenge_method": "S256"}
    assert "?x=1&response_type" in authorization_url("https://a/auth?x=1", client_id="c", redirect_url="r",
                                                     scopes=[], state="s", code_challenge="ch")


def test_pkce_follows_rfc_7636() -> None:
    # RFC 7636 appendix B: this verifier's S256 challenge.
    challenge = pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
    assert challenge == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    verifier = pkce_verifier(KEY, "nonce-1")
    # 43 to 128 unreserved characters; one per authorization; only this key makes it.
    assert 43 <= len(verifier) <= 128 and re.fullmatch(r"[A-Za-z0-9\-._~]+", verifier)
    assert verifier == pkce_verifier(KEY, "nonce-1") != pkce_verifier(KEY, "nonce-2")
    assert verifier != pkce_verifier(b"another key" * 3, "nonce-1")


def test_token_answers() -> None:
    first = tokens_from_response({"access_token": "at1", "refresh_token": "rt1", "expires_in": 3599,
                                  "scope": "a b", "token_type": "Bearer"}, NOW)
    assert (first.access_token, first.refresh_token, first.scope) == ("at1", "rt1", "a b")
    assert first.expires_at == NOW + dt.timedelta(seconds=3599)
    # A refresh answer keeps the refresh token and scope it does not repeat.
    second = tokens_from_response({"access_token": "at2", "expires_in": 60}, NOW, previous=first)
    assert (second.access_token, second.refresh_token, second.scope) == ("at2", "rt1", "a b")
    # A new refresh token (rotation) replaces the old one; no expires_in means an hour.
    third = tokens_from_response({"access_token": "at3", "refresh_token": "rt2"}, NOW, previous=second)
    assert third.refresh_token == "rt2" and third.expires_at == NOW + dt.timedelta(hours=1)
    with pytest.raises(PermanentJobError) as error:
        tokens_from_response({"token_type": "Bearer"}, NOW)
    assert error.value.code == "INTEGRATION_AUTH_EXPIRED"
    assert Tokens.from_json(first.to_json()) == first
    assert "at1" not in repr(first) and "rt1" not in repr(first)


def test_refresh_happens_within_the_margin_before_expiry() -> None:
    tokens = Tokens("at", "rt", NOW + dt.timedelta(seconds=REFRESH_MARGIN_S + 10))
    assert not needs_refresh(tokens, NOW)
    assert not needs_refresh(tokens, NOW + dt.timedelta(seconds=9))
    assert needs_refresh(tokens, NOW + dt.timedelta(seconds=10))
    assert needs_refresh(tokens, NOW + dt.timedelta(hours=2))
    assert needs_refresh(tokens, NOW, margin_s=REFRESH_MARGIN_S + 10)


def test_missing_scopes() -> None:
    assert missing_scopes("openid https://x/drive.readonly", ["https://x/drive.readonly"]) == []
    assert missing_scopes("openid email", ["https://x/drive.readonly"]) == ["https://x/drive.readonly"]
    assert missing_scopes("", ["a", "b"]) == ["a", "b"]


@pytest.mark.parametrize("status, body, code, transient", [
    (400, {"error": "invalid_grant", "error_description": "Token has been expired or revoked."},
     "INTEGRATION_AUTH_EXPIRED", False),
    (400, {"error": "invalid_scope"}, "INTEGRATION_PERMISSION_DENIED", False),
    (401, {"error": "invalid_client"}, "INTEGRATION_ACCESS_DENIED", False),
    (400, {"error": "unauthorized_client"}, "INTEGRATION_ACCESS_DENIED", False),
    (400, {"error": "invalid_request"}, "INTEGRATION_AUTH_EXPIRED", False),
    (400, {}, "INTEGRATION_AUTH_EXPIRED", False),
    (429, {"error": "rate_limit_exceeded"}, "INTERNAL_ERROR", True),
    (500, {}, "INTERNAL_ERROR", True),
    (503, {"error": "invalid_grant"}, "INTERNAL_ERROR", True),  # a 5xx is the server's, whatever it says
])
def test_token_endpoint_errors(status: int, body: dict[str, str], code: str, transient: bool) -> None:
    error = token_error(status, body, retry_after_s=7 if transient else None)
    assert error.code == code and isinstance(error, TransientJobError if transient else PermanentJobError)
    if transient:
        assert error.retry_after_s == 7
