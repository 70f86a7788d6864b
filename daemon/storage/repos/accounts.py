"""Users, refresh sessions and API keys. Each function is one unit of work run by
`Database.run`/`Database.read`; none of them hashes a password (that is slow
and belongs outside a transaction)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from daemon.auth.emails import email_key
from daemon.errors import Conflict, Forbidden
from daemon.storage.database import lock_rows, serialize
from daemon.storage.ids import new_id
from daemon.storage.tables import api_keys, sessions, users

# last_used_at is written at most this often per session or key, so that
# authenticating a request is nearly always a read, not a write.
TOUCH_INTERVAL = dt.timedelta(seconds=60)


class Role(StrEnum):
    USER = "USER"
    ADMIN = "ADMIN"

    def allows(self, other: Role) -> bool:
        """Whether a holder of this role may grant `other` (a key never exceeds its owner)."""
        return self == Role.ADMIN or other == Role.USER


# --- users ---------------------------------------------------------------------------

def has_users(conn: Connection) -> bool:
    """Whether any account exists: until one does, anyone may register (as the admin)."""
    return conn.execute(sa.select(users.c.id).limit(1)).first() is not None


def create_user(conn: Connection, *, email: str, name: str, password_hash: str, now: dt.datetime,
                registration_open: bool = True, role: Role | None = None) -> Row[Any]:
    """Create an account; the first account ever is ADMIN unless `role` says otherwise.

    Raises:
        Forbidden: registration is closed and an account exists.
        Conflict: the e-mail is taken (in any spelling of it: `email_key`).
    """
    serialize(conn, "docex.register")  # exactly one "first account" becomes ADMIN
    any_user = has_users(conn)
    if any_user and not registration_open:
        raise Forbidden("Registration is closed")
    key = email_key(email)
    if conn.execute(sa.select(users.c.id).where(users.c.email_key == key)).first():
        raise Conflict("An account with this email already exists")
    user_id = new_id()
    row = {
        "id": user_id, "email": email, "email_key": key, "name": name,
        "password_hash": password_hash, "role": role or (Role.USER if any_user else Role.ADMIN),
        "disabled": False, "created_at": now, "updated_at": now,
    }
    conn.execute(users.insert().values(**row))
    return conn.execute(sa.select(users).where(users.c.id == user_id)).one()


_GET_USER = sa.select(users).where(users.c.id == sa.bindparam("user_id"))


def get_user(conn: Connection, user_id: str) -> Row[Any] | None:
    return conn.execute(_GET_USER, {"user_id": user_id}).first()


def find_user_by_email(conn: Connection, email: str) -> Row[Any] | None:
    return conn.execute(sa.select(users).where(users.c.email_key == email_key(email))).first()


def list_users(conn: Connection, limit: int, cursor: str | None) -> list[Row[Any]]:
    query = sa.select(users).order_by(users.c.id.desc()).limit(limit + 1)
    if cursor:
        query = query.where(users.c.id < cursor)
    return list(conn.execute(query))


def update_user(conn: Connection, user_id: str, changes: dict[str, Any], now: dt.datetime) -> Row[Any] | None:
    """Change a user's role or disabled flag; None if there is no such user.

    Disabling ends every session of the account for good: an account is disabled because
    it should not be used, often because a credential of it leaked, and enabling it again
    must not bring a thief's stolen token back to life; its owner signs in again. API keys
    are refused while the account is disabled and work again once it is enabled (programs
    keep running); a key that leaked is revoked by its owner.

    Raises:
        Conflict: the change would leave no active admin (the caller cannot demote
            themselves, but two admins demoting each other at once could).
    """
    if changes:
        # The active admins are locked first: two such changes run one after the other, and
        # the second sees what the first did.
        active = lock_rows(conn, sa.select(users.c.id).where(users.c.role == Role.ADMIN, users.c.disabled.is_(False)))
        admins = {row.id for row in conn.execute(active)}
        conn.execute(users.update().where(users.c.id == user_id).values(**changes, updated_at=now))
        if user_id in admins and not conn.execute(active).first():
            raise Conflict("This would leave no active admin; make another user ADMIN first")
        if changes.get("disabled") is True:
            revoke_user_sessions(conn, user_id, now, "disabled")
    return get_user(conn, user_id)


def set_password(conn: Connection, user_id: str, password_hash: str, now: dt.datetime, *,
                 end_sessions: bool, keep_session: str | None = None) -> None:
    """Store a new password hash; with `end_sessions`, every session of the user but
    `keep_session` ends (whoever knew the old password may hold one). API keys stay."""
    conn.execute(users.update().where(users.c.id == user_id).values(password_hash=password_hash, updated_at=now))
    if end_sessions:
        revoke_user_sessions(conn, user_id, now, "password", keep=keep_session)


# --- refresh sessions ----------------------------------------------------------------

def create_session(conn: Connection, *, user_id: str, refresh_hash: str, now: dt.datetime, ttl_s: int,
                   user_agent: str | None, ip: str | None, family_id: str | None = None) -> Row[Any]:
    session_id = new_id()
    conn.execute(sessions.insert().values(
        id=session_id, user_id=user_id, family_id=family_id or session_id, refresh_hash=refresh_hash,
        created_at=now, last_used_at=now, expires_at=now + dt.timedelta(seconds=ttl_s),
        user_agent=(user_agent or "")[:500] or None, ip=ip,
    ))
    return conn.execute(sa.select(sessions).where(sessions.c.id == session_id)).one()


class RotateOutcome(StrEnum):
    ROTATED = "rotated"
    INVALID = "invalid"  # unknown, expired, logged out, or the account is disabled
    REUSED = "reused"  # an already-rotated token: the whole family was revoked


@dataclass(frozen=True)
class Rotation:
    outcome: RotateOutcome
    user: Row[Any] | None = None
    session: Row[Any] | None = None
    user_id: str | None = None  # whose token was reused, for the audit log


def rotate_session(conn: Connection, *, refresh_hash: str, new_refresh_hash: str, now: dt.datetime,
                   ttl_s: int, user_agent: str | None, ip: str | None) -> Rotation:
    """Trade a refresh token for a new session of the same family.

    Returns an outcome rather than raising, so that the revocation of a family on
    reuse is committed before the caller answers 401.
    """
    query = sa.select(sessions).where(sessions.c.refresh_hash == refresh_hash)
    found = conn.execute(query).first()
    if found is None:
        return Rotation(RotateOutcome.INVALID)
    lock_user(conn, found.user_id)
    # Two refreshes with one token: one wins, one is reuse.
    old = conn.execute(lock_rows(conn, query)).first()
    if old is None:
        return Rotation(RotateOutcome.INVALID)
    if old.revoked_at is not None:
        if old.revoked_reason == "rotated":
            revoke_family(conn, old.family_id, now, "reuse")
            return Rotation(RotateOutcome.REUSED, user_id=old.user_id)
        return Rotation(RotateOutcome.INVALID)
    user = get_user(conn, old.user_id)
    if old.expires_at <= now or user is None or user.disabled:
        return Rotation(RotateOutcome.INVALID)
    conn.execute(sessions.update().where(sessions.c.id == old.id)
                 .values(revoked_at=now, revoked_reason="rotated", last_used_at=now))
    new = create_session(conn, user_id=old.user_id, refresh_hash=new_refresh_hash, now=now, ttl_s=ttl_s,
                         user_agent=user_agent, ip=ip, family_id=old.family_id)
    return Rotation(RotateOutcome.ROTATED, user, new)


def revoke_family(conn: Connection, family_id: str, now: dt.datetime, reason: str) -> None:
    conn.execute(sessions.update()
                 .where(sessions.c.family_id == family_id, sessions.c.revoked_at.is_(None))
                 .values(revoked_at=now, revoked_reason=reason))


class LogoutOutcome(StrEnum):
    LOGGED_OUT = "logged_out"  # revoked now, or by an earlier logout (logout is idempotent)
    INVALID = "invalid"  # no session has this token
    REUSED = "reused"  # an already-rotated token: theft, as on refresh; the whole family was revoked


def revoke_session_by_refresh(conn: Connection, refresh_hash: str, now: dt.datetime) -> LogoutOutcome:
    """Log out the session of a refresh token. Like `rotate_session`, returns rather than
    raises, so that the revocation of a family on reuse is committed before the 401."""
    row = conn.execute(lock_rows(conn, sa.select(sessions.c.id, sessions.c.family_id, sessions.c.revoked_at,
                                                 sessions.c.revoked_reason)
                                 .where(sessions.c.refresh_hash == refresh_hash))).first()
    if row is None:
        return LogoutOutcome.INVALID
    if row.revoked_reason == "rotated":
        # Whoever holds a rotated token is not the session's latest holder, whatever route
        # they present it to (SPEC §4): a thief must not learn it is still good, nor leave
        # the family's newer sessions alive.
        revoke_family(conn, row.family_id, now, "reuse")
        return LogoutOutcome.REUSED
    if row.revoked_at is None:
        conn.execute(sessions.update().where(sessions.c.id == row.id)
                     .values(revoked_at=now, revoked_reason="logout"))
    return LogoutOutcome.LOGGED_OUT


def lock_user(conn: Connection, user_id: str) -> None:
    """Lock the user's row (PostgreSQL) before a change that depends on what the user holds:
    two creations of an API key or an endpoint at once could both pass its count, and a
    refresh made a session that the UPDATE of a logout-all running at the same moment did
    not see (its snapshot was older), so the session outlived the logout's 204. Each now
    waits for the other and then sees what it did."""
    conn.execute(lock_rows(conn, sa.select(users.c.id).where(users.c.id == user_id)))


def revoke_user_sessions(conn: Connection, user_id: str, now: dt.datetime, reason: str = "logout_all",
                         keep: str | None = None) -> None:
    """End every session of the user, but `keep` (the session making the request)."""
    lock_user(conn, user_id)
    query = sessions.update().where(sessions.c.user_id == user_id, sessions.c.revoked_at.is_(None))
    if keep is not None:
        query = query.where(sessions.c.id != keep)
    conn.execute(query.values(revoked_at=now, revoked_reason=reason))


def revoke_session(conn: Connection, user_id: str, session_id: str, now: dt.datetime) -> bool:
    result = conn.execute(sessions.update()
                          .where(sessions.c.id == session_id, sessions.c.user_id == user_id,
                                 sessions.c.revoked_at.is_(None), sessions.c.expires_at > now)
                          .values(revoked_at=now, revoked_reason="deleted"))
    return result.rowcount == 1


def list_sessions(conn: Connection, user_id: str, now: dt.datetime, limit: int,
                  cursor: str | None) -> list[Row[Any]]:
    query = (sa.select(sessions)
             .where(sessions.c.user_id == user_id, sessions.c.revoked_at.is_(None), sessions.c.expires_at > now)
             .order_by(sessions.c.id.desc()).limit(limit + 1))
    if cursor:
        query = query.where(sessions.c.id < cursor)
    return list(conn.execute(query))


# Built once: these run on every authenticated request, and building a select costs
# more than SQLite takes to answer it.
_ACTIVE_SESSION_USER = (
    sa.select(users, sessions.c.last_used_at.label("session_last_used_at"))
    .join(sessions, sessions.c.user_id == users.c.id)
    .where(sessions.c.id == sa.bindparam("session_id"), sessions.c.revoked_at.is_(None),
           sessions.c.expires_at > sa.bindparam("now"), users.c.disabled.is_(False))
)


def active_session_user(conn: Connection, session_id: str, now: dt.datetime) -> Row[Any] | None:
    """The enabled user behind a live session (read only: see `touch_session`)."""
    return conn.execute(_ACTIVE_SESSION_USER, {"session_id": session_id, "now": now}).first()


def needs_touch(last_used_at: dt.datetime | None, now: dt.datetime) -> bool:
    return last_used_at is None or last_used_at < now - TOUCH_INTERVAL


def touch_session(conn: Connection, session_id: str, now: dt.datetime) -> None:
    conn.execute(sessions.update().where(sessions.c.id == session_id).values(last_used_at=now))


def touch_api_key(conn: Connection, key_id: str, now: dt.datetime) -> None:
    conn.execute(api_keys.update().where(api_keys.c.id == key_id).values(last_used_at=now))


# --- API keys ------------------------------------------------------------------------

def _active_key(now: dt.datetime) -> sa.ColumnElement[bool]:
    return sa.and_(api_keys.c.revoked_at.is_(None),
                   sa.or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > now))


def create_api_key(conn: Connection, *, user_id: str, name: str, role: Role, prefix: str, last4: str,
                   key_hash: str, expires_at: dt.datetime | None, now: dt.datetime,
                   max_active: int) -> Row[Any]:
    """Raises Conflict when the user already holds `max_active` active keys."""
    lock_user(conn, user_id)
    active = conn.execute(sa.select(sa.func.count()).select_from(api_keys)
                          .where(api_keys.c.user_id == user_id, _active_key(now))).scalar_one()
    if active >= max_active:
        raise Conflict(f"At most {max_active} active API keys per user; revoke one first")
    key_id = new_id()
    conn.execute(api_keys.insert().values(
        id=key_id, user_id=user_id, name=name, role=role, prefix=prefix, last4=last4, key_hash=key_hash,
        created_at=now, expires_at=expires_at,
    ))
    return conn.execute(sa.select(api_keys).where(api_keys.c.id == key_id)).one()


def list_api_keys(conn: Connection, user_id: str, now: dt.datetime, limit: int,
                  cursor: str | None) -> list[Row[Any]]:
    query = (sa.select(api_keys).where(api_keys.c.user_id == user_id, api_keys.c.revoked_at.is_(None))
             .order_by(api_keys.c.id.desc()).limit(limit + 1))
    if cursor:
        query = query.where(api_keys.c.id < cursor)
    return list(conn.execute(query))


def revoke_api_key(conn: Connection, user_id: str, key_id: str, now: dt.datetime) -> bool:
    result = conn.execute(api_keys.update()
                          .where(api_keys.c.id == key_id, api_keys.c.user_id == user_id,
                                 api_keys.c.revoked_at.is_(None))
                          .values(revoked_at=now))
    return result.rowcount == 1


_ACTIVE_API_KEY_USER = (
    sa.select(users, api_keys.c.id.label("key_id"), api_keys.c.role.label("key_role"),
              api_keys.c.last_used_at.label("key_last_used_at"))
    .join(api_keys, api_keys.c.user_id == users.c.id)
    .where(api_keys.c.key_hash == sa.bindparam("key_hash"), api_keys.c.revoked_at.is_(None),
           sa.or_(api_keys.c.expires_at.is_(None), api_keys.c.expires_at > sa.bindparam("now")),
           users.c.disabled.is_(False))
)


def active_api_key_user(conn: Connection, key_hash: str, now: dt.datetime) -> Row[Any] | None:
    """The key and its enabled owner (read only: see `touch_api_key`)."""
    return conn.execute(_ACTIVE_API_KEY_USER, {"key_hash": key_hash, "now": now}).first()


# --- admin ---------------------------------------------------------------------------

def account_stats(conn: Connection, now: dt.datetime) -> dict[str, int]:
    def count(query: sa.Select[Any]) -> int:
        return int(conn.execute(query).scalar_one())

    return {
        "users": count(sa.select(sa.func.count()).select_from(users)),
        "admins": count(sa.select(sa.func.count()).select_from(users).where(users.c.role == Role.ADMIN)),
        "disabledUsers": count(sa.select(sa.func.count()).select_from(users).where(users.c.disabled.is_(True))),
        "activeSessions": count(sa.select(sa.func.count()).select_from(sessions).where(
            sessions.c.revoked_at.is_(None), sessions.c.expires_at > now)),
        "activeApiKeys": count(sa.select(sa.func.count()).select_from(api_keys).where(_active_key(now))),
    }
