"""Who is calling: resolve a Bearer credential to a `Principal`, or refuse with 401.

A Bearer value with two dots is an access JWT; anything else is looked up as
an API key (so keys made under an earlier API_KEY_PREFIX keep working). Both
paths check the database on every request, so a revoked session, a revoked or
expired key and a disabled account stop working at once, not at expiry.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from daemon.auth import tokens
from daemon.errors import Unauthorized
from daemon.services import Services
from daemon.storage.repos import accounts
from daemon.storage.repos.accounts import Role


class Credential(StrEnum):
    ACCESS_TOKEN = "access_token"
    API_KEY = "api_key"


@dataclass(frozen=True)
class Principal:
    user_id: str
    role: Role
    credential: Credential
    session_id: str | None = None
    api_key_id: str | None = None
    # The account row read while authenticating (users.* columns), for routes that show it.
    user: Any = field(default=None, compare=False, repr=False)

    @property
    def rate_key(self) -> str:
        return f"key:{self.api_key_id}" if self.api_key_id else f"user:{self.user_id}"


def bearer(authorization: str | None) -> str:
    if not authorization:
        raise Unauthorized("Missing Authorization header")
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthorized("Authorization must be 'Bearer <access token or API key>'")
    return value.strip()


async def authenticate(services: Services, authorization: str | None, now: dt.datetime) -> Principal:
    token = bearer(authorization)
    if tokens.looks_like_jwt(token):
        secret = services.config.auth.jwt_access_secret
        assert secret is not None, "secrets are filled in before serving"
        claims = tokens.verify_access_token(secret.reveal(), token, now)
        user = await services.db.read(accounts.active_session_user, claims.session_id, now)
        if user is None or user.id != claims.user_id:
            raise Unauthorized("Session revoked or expired")
        if accounts.needs_touch(user.session_last_used_at, now):
            await services.db.run(accounts.touch_session, claims.session_id, now)
        # The account's current role, not the one in the token: a demotion applies at once.
        return Principal(user.id, Role(user.role), Credential.ACCESS_TOKEN, session_id=claims.session_id, user=user)
    row = await services.db.read(accounts.active_api_key_user, tokens.token_hash(token), now)
    if row is None:
        raise Unauthorized("Invalid, revoked or expired API key")
    if accounts.needs_touch(row.key_last_used_at, now):
        await services.db.run(accounts.touch_api_key, row.key_id, now)
    # A key never exceeds its owner, even after the owner is demoted.
    role = Role(row.key_role) if Role(row.role).allows(Role(row.key_role)) else Role.USER
    return Principal(row.id, role, Credential.API_KEY, api_key_id=row.key_id, user=row)
