"""Account flows: register, log in, refresh, log out, API keys.

Each flow hashes outside any transaction (bcrypt is slow), then does its
database work as one unit. The HTTP routes and the CLI both call these.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any, TypedDict

from sqlalchemy.engine import Connection, Row

from daemon.auth import passwords, tokens
from daemon.auth.emails import MAX_KEY_LENGTH, email_key, look_alike
from daemon.clock import utcnow
from daemon.errors import BadRequest, Forbidden, NotFound, Unauthorized
from daemon.services import Services
from daemon.storage.repos import accounts
from daemon.storage.repos.accounts import LogoutOutcome, Role, RotateOutcome

# Security events (sign-in failures, stolen refresh tokens, password and role changes):
# who did what, never a secret, for an administrator auditing an account.
log = logging.getLogger("daemon.audit")


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
    return _pair(services, user, session, refresh, now)


def _pair(services: Services, user: Row[Any], session: Row[Any], refresh: str, now: dt.datetime) -> TokenPair:
    return TokenPair(user, _access_token(services, user, session.id, now), refresh,
                     services.config.auth.access_ttl_s, session.id)


async def create_user(services: Services, *, name: str, email: str, password: str,
                      role: Role | None = None, ignore_registration: bool = False) -> Row[Any]:
    """Raises BadRequest (a look-alike spelling, or an address too long once normalised),
    Conflict (e-mail taken, in any spelling) or Forbidden (registration closed)."""
    return await services.db.run(
        accounts.create_user, **await _new_account(services, name=name, email=email, password=password),
        now=utcnow(), registration_open=ignore_registration or services.config.auth.registration == "open",
        role=role,
    )


class _Account(TypedDict):
    email: str
    name: str
    password_hash: str


async def _new_account(services: Services, *, name: str, email: str, password: str) -> _Account:
    """The new account's columns, the password hashed. Raises BadRequest for a look-alike
    spelling of the address, or one too long once normalised."""
    plain = look_alike(email)
    if plain is not None:
        raise BadRequest([f"email must be written with plain characters (as {plain})"])
    if len(email_key(email)) > MAX_KEY_LENGTH:
        raise BadRequest([f"email must be shorter than or equal to {MAX_KEY_LENGTH} characters once normalised"])
    password_hash = await passwords.hash_password(password, services.config.auth.bcrypt_rounds)
    return {"email": email, "name": name, "password_hash": password_hash}


async def register(services: Services, *, name: str, email: str, password: str, client: Client) -> TokenPair:
    """The account and its first session in one transaction: no account is left behind
    when the session cannot be stored."""
    account = await _new_account(services, name=name, email=email, password=password)
    refresh = tokens.new_refresh_token()
    now = utcnow()

    def create(conn: Connection) -> tuple[Row[Any], Row[Any]]:
        user = accounts.create_user(conn, **account, now=now,
                                    registration_open=services.config.auth.registration == "open")
        return user, accounts.create_session(
            conn, user_id=user.id, refresh_hash=tokens.token_hash(refresh), now=now,
            ttl_s=services.config.auth.refresh_ttl_s, user_agent=client.user_agent, ip=client.ip)

    user, session = await services.db.run(create)
    return _pair(services, user, session, refresh, now)


async def login(services: Services, *, email: str, password: str, client: Client) -> TokenPair:
    """Same 401, in the same time, for an unknown e-mail and a wrong password."""
    user = await services.db.read(accounts.find_user_by_email, email)
    ok = await passwords.verify_password(
        password, user.password_hash if user else None, services.config.auth.bcrypt_rounds
    )
    if not ok or user is None:
        log.info("sign-in refused", extra={"action": "auth.login_failed", "user_id": user.id if user else None,
                                           "ip": client.ip})
        raise Unauthorized("Invalid email or password")
    if user.disabled:
        raise Forbidden("This account is disabled")
    rounds = services.config.auth.bcrypt_rounds
    if passwords.needs_rehash(user.password_hash, rounds):
        rehashed = await passwords.hash_password(password, rounds)
        await services.db.run(accounts.set_password, user.id, rehashed, utcnow(), end_sessions=False)
    return await _new_session(services, user, client, utcnow())


async def change_password(services: Services, *, user_id: str, current: str, new: str,
                          keep_session: str | None) -> None:
    """Replace the password after checking the current one; every other session ends.

    Raises:
        Forbidden: the current password is wrong.
    """
    rounds = services.config.auth.bcrypt_rounds
    user = await services.db.read(accounts.get_user, user_id)
    if user is None or not await passwords.verify_password(current, user.password_hash, rounds):
        log.info("password change refused", extra={"action": "auth.password_change_refused", "user_id": user_id})
        raise Forbidden("The current password is wrong")
    new_hash = await passwords.hash_password(new, rounds)
    await services.db.run(accounts.set_password, user_id, new_hash, utcnow(), end_sessions=True,
                          keep_session=keep_session)
    log.info("password changed; the other sessions ended", extra={"action": "auth.password_changed",
                                                                  "user_id": user_id})


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
        log.warning("a rotated refresh token was presented again: every session of its login was revoked",
                    extra={"action": "auth.refresh_reused", "user_id": rotation.user_id, "ip": client.ip})
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
        log.warning("a rotated refresh token was presented again: every session of its login was revoked",
                    extra={"action": "auth.refresh_reused"})
        raise Unauthorized("Refresh token already used; every session of this login was revoked")
    if outcome is not LogoutOutcome.LOGGED_OUT:
        raise Unauthorized("Invalid refresh token")


async def reset_password(services: Services, *, email: str, new: str) -> Row[Any]:
    """An administrator's reset (`docex users set-password`): a new password, every session
    ended. Raises NotFound when no account has the address."""
    user = await services.db.read(accounts.find_user_by_email, email)
    if user is None:
        raise NotFound(f"No account has the e-mail address {email}")
    new_hash = await passwords.hash_password(new, services.config.auth.bcrypt_rounds)
    await services.db.run(accounts.set_password, user.id, new_hash, utcnow(), end_sessions=True)
    log.info("password reset on the server; every session ended", extra={"action": "auth.password_reset",
                                                                          "user_id": user.id})
    return user


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
