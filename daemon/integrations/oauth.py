"""OAuth 2.0 authorization-code flow, the pure parts (RFC 6749 §4.1): the signed
`state`, the authorization URL, token responses and when to refresh. No I/O here;
every time decision takes `now`.

The state binds a callback to one user's one integration and one moment:

    state = b64url(payload) "." b64url(HMAC-SHA256(key, "docex-oauth-state." b64url(payload)))
    payload = {"u": user id, "i": integration id, "n": nonce, "exp": unix seconds}

The key is derived from JWT_ACCESS_SECRET (`state_key`), so a state is never a valid
token and vice versa. The nonce is also stored on the integration and cleared when a
callback completes, so each state works once and a newer one supersedes it.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import hmac
import json
import math
import secrets
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.errors import DocexError, JobError, PermanentJobError, TransientJobError
from daemon.jobs.models import ErrorCode

STATE_TTL_S = 15 * 60
# Refresh an access token this long before it expires, so one never expires mid-request.
REFRESH_MARGIN_S = 60
_STATE_CONTEXT = b"docex-oauth-state."
# The longest an access token is believed to live, whatever the token endpoint says.
MAX_TOKEN_LIFETIME_S = 24 * 3600.0


class InvalidState(DocexError):
    """A callback's state is malformed, forged or expired; `reason` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class OAuthState:
    user_id: str
    integration_id: str
    nonce: str
    expires_at: dt.datetime


def state_key(jwt_secret: str) -> bytes:
    """The HMAC key of states, derived from the JWT secret for this one purpose."""
    return hmac.new(jwt_secret.encode("utf-8"), b"docex oauth state v1", hashlib.sha256).digest()


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def pkce_verifier(key: bytes, nonce: str) -> str:
    """The PKCE code verifier of one authorization (RFC 7636 §4.1): derived from its nonce
    under the state key, so nothing more is stored and only this server can make it. A
    code intercepted on its way back (a hostile browser extension, a leaked log) is
    worthless without it."""
    return _b64(hmac.new(key, b"docex oauth pkce v1:" + nonce.encode("utf-8"), hashlib.sha256).digest())


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of `verifier` (RFC 7636 §4.2)."""
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_state(key: bytes, *, user_id: str, integration_id: str, nonce: str, now: dt.datetime,
               ttl_s: int = STATE_TTL_S) -> str:
    payload = {"u": user_id, "i": integration_id, "n": nonce, "exp": int(now.timestamp()) + ttl_s}
    body = _b64(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8"))
    mac = hmac.new(key, _STATE_CONTEXT + body.encode("ascii"), hashlib.sha256).digest()
    return f"{body}.{_b64(mac)}"


def verify_state(key: bytes, state: str, now: dt.datetime) -> OAuthState:
    """The state's contents, if `key` signed it and it has not expired at `now`.

    Raises:
        InvalidState: malformed, bad signature (checked in constant time), or expired.
    """
    body, dot, mac = state.partition(".")
    if not dot or not body or not mac or len(state) > 1024:
        raise InvalidState("malformed state")
    expected = hmac.new(key, _STATE_CONTEXT + body.encode("ascii", "replace"), hashlib.sha256).digest()
    try:
        given = _unb64(mac)
        payload = json.loads(_unb64(body))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidState("malformed state") from None
    if not hmac.compare_digest(given, expected):
        raise InvalidState("state signature does not match")
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), str) for k in ("u", "i", "n")) \
            or not isinstance(payload.get("exp"), int):
        raise InvalidState("malformed state")
    expires_at = dt.datetime.fromtimestamp(payload["exp"], dt.UTC)
    if now >= expires_at:
        raise InvalidState("state expired")
    return OAuthState(payload["u"], payload["i"], payload["n"], expires_at)


def authorization_url(auth_url: str, *, client_id: str, redirect_url: str, scopes: list[str], state: str,
                      code_challenge: str) -> str:
    """Where to send the user's browser. `access_type=offline` and `prompt=consent` make
    Google issue a refresh token every time, also when the user had consented before;
    the code is bound to `code_challenge` (PKCE, S256)."""
    query = urllib.parse.urlencode({
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_url,
        "scope": " ".join(scopes),
        "state": state,
        "access_type": "offline",
        "prompt": "consent",
        "include_granted_scopes": "true",
        "code_challenge": code_challenge,
        "code_challenge_method": "S256",
    })
    return f"{auth_url}{'&' if '?' in auth_url else '?'}{query}"


@dataclass(frozen=True)
class Tokens:
    """An OAuth grant as stored (sealed). `scope` is what the user actually granted."""

    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    expires_at: dt.datetime
    scope: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"accessToken": self.access_token, "refreshToken": self.refresh_token,
                "expiresAt": self.expires_at.timestamp(), "scope": self.scope}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Tokens:
        return cls(
            access_token=str(data.get("accessToken", "")),
            refresh_token=data.get("refreshToken"),
            expires_at=dt.datetime.fromtimestamp(float(data.get("expiresAt", 0)), dt.UTC),
            scope=str(data.get("scope", "")),
        )


def tokens_from_response(body: Mapping[str, Any], now: dt.datetime, previous: Tokens | None = None) -> Tokens:
    """The grant of a token endpoint's 200 answer. A refresh answer usually carries no
    refresh token (nor, sometimes, a scope): the previous ones are kept.

    Raises:
        PermanentJobError: the answer has no access token (INTEGRATION_AUTH_EXPIRED).
    """
    access = body.get("access_token")
    if not isinstance(access, str) or not access:
        raise PermanentJobError(ErrorCode.INTEGRATION_AUTH_EXPIRED, "The token endpoint returned no access token")
    expires_in = body.get("expires_in")
    lifetime = float(expires_in) if isinstance(expires_in, int | float) and not isinstance(expires_in, bool) \
        and math.isfinite(expires_in) else 3600.0
    # Google says 3599; any other number (10**20 overflowed the expiry's datetime: the callback
    # answered a 500) is held to what a datetime and a sane refresh schedule take.
    lifetime = min(max(lifetime, 0.0), MAX_TOKEN_LIFETIME_S)
    refresh = body.get("refresh_token")
    scope = body.get("scope")
    return Tokens(
        access_token=access,
        refresh_token=refresh if isinstance(refresh, str) and refresh else (previous.refresh_token if previous
                                                                             else None),
        expires_at=now + dt.timedelta(seconds=lifetime),
        scope=scope if isinstance(scope, str) else (previous.scope if previous else ""),
    )


def needs_refresh(tokens: Tokens, now: dt.datetime, margin_s: float = REFRESH_MARGIN_S) -> bool:
    """Whether to refresh before using the access token: it expires within `margin_s`."""
    return now >= tokens.expires_at - dt.timedelta(seconds=margin_s)


def missing_scopes(granted: str, required: list[str]) -> list[str]:
    """Required scopes the grant lacks (scopes are space-separated, RFC 6749 §3.3)."""
    have = set(granted.split())
    return [scope for scope in required if scope not in have]


def token_error(status: int, body: Mapping[str, Any], retry_after_s: float | None = None) -> JobError:
    """The SPEC §6 error for a token endpoint's refusal (RFC 6749 §5.2).

    `invalid_grant` (the refresh token or code expired, was revoked or used) means the user
    must authorize again: INTEGRATION_AUTH_EXPIRED. A refused client is the operator's
    google.client_id/client_secret. 429 and 5xx are transient.
    """
    error = str(body.get("error", "")) if isinstance(body, Mapping) else ""
    if status == 429 or status >= 500:
        return TransientJobError(ErrorCode.INTERNAL_ERROR, f"The OAuth token endpoint is unavailable ({status})",
                                 retry_after_s=retry_after_s)
    if error == "invalid_grant":
        return PermanentJobError(ErrorCode.INTEGRATION_AUTH_EXPIRED,
                                 "The Google authorization expired or was revoked: reconnect the integration")
    if error == "invalid_scope":
        return PermanentJobError(ErrorCode.INTEGRATION_PERMISSION_DENIED, "The Google authorization lacks a scope")
    if error in ("invalid_client", "unauthorized_client"):
        return PermanentJobError(ErrorCode.INTEGRATION_ACCESS_DENIED,
                                 f"The OAuth client was refused ({error}): check google.client_id and client_secret")
    return PermanentJobError(ErrorCode.INTEGRATION_AUTH_EXPIRED,
                             f"The OAuth token endpoint refused the grant ({error or status}): reconnect")
