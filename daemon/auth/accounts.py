"""Account flows: register, log in, refresh, log out, API keys.

Each flow hashes outside any transaction (bcrypt is slow), then does its
database work as one unit. The HTTP routes and the CLI both call these.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Row

from daemon.auth import passwords, tokens
from daemon.auth.emails import MAX_KEY_LENGTH, email_key, look_alike
from daemon.clock import utcnow
from daemon.errors import BadRequest, Forbidden, Unauthorized
from daemon.services import Services
from daemon.storage.repos import accounts
from daemon.storage.repos.accounts import LogoutOutcome, Role, RotateOutcome


@dataclass(frozen=True)
class TokenPair:
    user: Row[Any]
    access_token: str
    refresh_token: str
    expires_in: int
    session_id: str


@dataclass(frozen=True)
class Client:
    """Where a login came from, shown in the sessions list."""

    user_agent: str | None = None
    ip: str | None = None


def _secret(services: Services) -> str:
    secret = services.config.auth.jwt_access_secret
    assert secret is not None, "secrets are filled in before serving"
    return secret.reveal()


def _access_token(services: Services, user: Row[Any], session_id: str, now: dt.datetime) -> str:
    return tokens.issue_access_token(
        _secret(services), user_id=user.id, role=user.role, session_id=session_id,
        now=now, ttl_s=services.config.auth.access_ttl_s,
    )


async def _new_session(services: Services, user: Row[Any], client: Client, now: dt.datetime) -> TokenPair:
    refresh = tokens.new_refresh_token()
    session = await services.db.run(
        accounts.create_session, user_id=user.id, refresh_hash=tokens.token_hash(refresh), now=now,
        ttl_s=services.config.auth.refresh_ttl_s, user_agent=client.user_agent, ip=client.ip,
    )
    return TokenPair(user, _access_token(services, user, session.id, now), refresh,
                     services.config.auth.access_ttl_s, session.id)


async def create_user(services: Services, *, name: str, email: str, password: str,
                      role: Role | None = None, ignore_registration: bool = False) -> Row[Any]:
    """Raises BadRequest (a look-alike spelling, or an address too long once normalised),
    Conflict (e-mail taken, in any spelling) or Forbidden (registration closed)."""
    plain = look_alike(email)
    if plain is not None:
        raise BadRequest([f"email must be written with plain characters (as {plain})"])
    if len(email_key(email)) > MAX_KEY_LENGTH:
        raise BadRequest([f"email must be shorter than or equal to {MAX_KEY_LENGTH} characters once normalised"])
    password_hash = await passwords.hash_password(password, services.config.auth.bcrypt_rounds)
    return await services.db.run(
        accounts.create_user, email=email, name=name, password_hash=password_hash, now=utcnow(),
        registration_open=ignore_registration or services.config.auth.registration == "open", role=role,
    )


async def register(services: Services, *, name: str, email: str, password: str, client: Client) -> TokenPair:
    user = await create_user(services, name=name, email=email, password=password)
    return await _new_session(services, user, client, utcnow())


async def login(services: Services, *, email: str, password: str, client: Client) -> TokenPair:
    """Same 401, in the same time, for an unknown e-mail and a wrong password."""
    user = await services.db.read(accounts.find_user_by_email, email)
    ok = await passwords.verify_password(
        password, user.password_hash if user else None, services.config.auth.bcrypt_rounds
    )
    if not ok or user is None:
        raise Unauthorized("Invalid email or password")
    if user.disabled:
        raise Forbidden("This account is disabled")
    return await _new_session(services, user, client, utcnow())


async def refresh(services: Services, refresh_token: str, client: Client) -> TokenPair:
    """Rotate: a new pair, the old session revoked. A rotated token presented again is
    treated as stolen: every session of that login is revoked and the answer is 401."""
    new_refresh = tokens.new_refresh_token()
    now = utcnow()
    rotation = await services.db.run(
        accounts.rotate_session, refresh_hash=tokens.token_hash(refresh_token),
        new_refresh_hash=tokens.token_hash(new_refresh), now=now,
        ttl_s=services.config.auth.refresh_ttl_s, user_agent=client.user_agent, ip=client.ip,
    )
    if rotation.outcome is RotateOutcome.REUSED:
        raise Unauthorized("Refresh token already used; every session of this login was revoked")
    if rotation.outcome is not RotateOutcome.ROTATED or rotation.user is None or rotation.session is None:
        raise Unauthorized("Invalid or expired refresh token")
    return TokenPair(rotation.user, _access_token(services, rotation.user, rotation.session.id, now),
                     new_refresh, services.config.auth.access_ttl_s, rotation.session.id)


async def logout(services: Services, refresh_token: str) -> None:
    """Revoke the token's session. A rotated token presented here is treated as stolen, as
    on refresh: every session of that login is revoked and the answer is 401."""
    outcome = await services.db.run(accounts.revoke_session_by_refresh, tokens.token_hash(refresh_token), utcnow())
    if outcome is LogoutOutcome.REUSED:
        raise Unauthorized("Refresh token already used; every session of this login was revoked")
    if outcome is not LogoutOutcome.LOGGED_OUT:
        raise Unauthorized("Invalid refresh token")


@dataclass(frozen=True)
class NewApiKey:
    row: Row[Any]
    plaintext: str


async def create_api_key(services: Services, *, user_id: str, owner_role: Role, name: str,
                         role: Role | None, expires_at: dt.datetime | None) -> NewApiKey:
    role = role or owner_role
    if not owner_role.allows(role):
        raise Forbidden(f"An API key's role cannot exceed its owner's ({owner_role})")
    prefix = services.config.auth.api_key_prefix
    plaintext = tokens.new_api_key(prefix)
    row = await services.db.run(
        accounts.create_api_key, user_id=user_id, name=name, role=role, prefix=prefix,
        last4=plaintext[-4:], key_hash=tokens.token_hash(plaintext), expires_at=expires_at, now=utcnow(),
        max_active=services.config.auth.max_api_keys_per_user,
    )
    return NewApiKey(row, plaintext)
