"""Access JWTs, refresh tokens and API keys. Pure: no I/O, `now` passed in.

- Access token: HS256 JWT with ``sub, role, sid, iat, exp, typ="access"``;
  verification pins the algorithm, so ``alg=none`` and RS/HS confusion fail.
- Refresh token: 256 random bits, base64url; stored only as its SHA-256.
- API key: the configured prefix + 32 random bytes in base62; stored only as
  its SHA-256. Both are high-entropy, so a fast hash is the right one: there
  is nothing to brute-force, and lookups stay one indexed equality.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass

from daemon.errors import Unauthorized

ALGORITHM = "HS256"
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class AccessClaims:
    user_id: str
    role: str
    session_id: str
    expires_at: dt.datetime


def issue_access_token(secret: str, *, user_id: str, role: str, session_id: str,
                       now: dt.datetime, ttl_s: int) -> str:
    claims = {
        "sub": user_id,
        "role": role,
        "sid": session_id,
        "iat": int(now.timestamp()),
        "exp": int(now.timestamp()) + ttl_s,
        "typ": "access",
    }
    import jwt  # here, not at start: pyjwt loads cryptography's backends (~35 ms of a ~1 s start)

    return jwt.encode(claims, secret, algorithm=ALGORITHM)


def verify_access_token(secret: str, token: str, now: dt.datetime) -> AccessClaims:
    """Raises:
        Unauthorized: expired, badly signed, wrong algorithm or type, missing claims.
    """
    import jwt

    try:
        claims = jwt.decode(
            token,
            secret,
            algorithms=[ALGORITHM],
            # Time is judged below against `now`, not by pyjwt against the wall clock.
            options={"require": ["sub", "sid", "iat", "exp", "typ"], "verify_exp": False, "verify_iat": False,
                     "verify_nbf": False},
        )
    except jwt.InvalidTokenError as exc:
        raise Unauthorized("Invalid access token") from exc
    if claims.get("typ") != "access":
        raise Unauthorized("Invalid access token")
    if not isinstance(claims["exp"], int) or claims["exp"] <= now.timestamp():
        raise Unauthorized("Access token expired")
    try:
        expires_at = dt.datetime.fromtimestamp(claims["exp"], dt.UTC)
    except (OverflowError, OSError, ValueError):  # past year 9999: no token docex issues
        raise Unauthorized("Invalid access token") from None
    return AccessClaims(
        user_id=str(claims["sub"]),
        role=str(claims.get("role", "")),
        session_id=str(claims["sid"]),
        expires_at=expires_at,
    )


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


def new_refresh_token() -> str:
    return secrets.token_urlsafe(32)


def new_api_key(prefix: str) -> str:
    number = int.from_bytes(secrets.token_bytes(32), "big")
    digits = []
    for _ in range(43):  # 62**43 > 2**256: every 32-byte value fits
        number, digit = divmod(number, 62)
        digits.append(_BASE62[digit])
    return prefix + "".join(reversed(digits))


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
