"""Integrations (SPEC §10). Each function is one unit of work for `Database.run`/`read`
(or a part of one).

Every lookup is scoped to its owner: another user's integration does not exist for
the caller. Secrets arrive and leave sealed (`daemon.integrations.sealing`); this
module never sees a credential in clear.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from daemon.errors import NotFound
from daemon.storage.tables import integrations


def create_integration(
    conn: Connection,
    *,
    integration_id: str,
    user_id: str,
    provider: str,
    name: str,
    status: str,
    config: dict[str, Any],
    secrets_sealed: bytes | None,
    oauth_nonce: str | None,
    now: dt.datetime,
) -> Row[Any]:
    conn.execute(integrations.insert().values(
        id=integration_id, user_id=user_id, provider=provider, name=name, status=status, config=config,
        secrets_sealed=secrets_sealed, oauth_nonce=oauth_nonce, created_at=now, updated_at=now,
    ))
    return _row(conn, integration_id)


def _row(conn: Connection, integration_id: str) -> Row[Any]:
    return conn.execute(sa.select(integrations).where(integrations.c.id == integration_id)).one()


def get_integration(conn: Connection, user_id: str, integration_id: str) -> Row[Any] | None:
    return conn.execute(
        sa.select(integrations).where(integrations.c.id == integration_id, integrations.c.user_id == user_id)
    ).first()


def owned_integration(conn: Connection, user_id: str, integration_id: str) -> Row[Any]:
    """The integration, or NotFound (also for another user's)."""
    row = get_integration(conn, user_id, integration_id)
    if row is None:
        raise NotFound("Integration not found")
    return row


def integrations_by_id(conn: Connection, user_id: str, ids: list[str]) -> dict[str, Row[Any]]:
    """The caller's integrations among `ids` (others' and unknown ones are left out)."""
    if not ids:
        return {}
    rows = conn.execute(
        sa.select(integrations).where(integrations.c.user_id == user_id, integrations.c.id.in_(sorted(set(ids))))
    )
    return {row.id: row for row in rows}


def list_integrations(conn: Connection, user_id: str, limit: int, cursor: str | None) -> list[Row[Any]]:
    """Newest first, ``limit + 1`` rows (see `daemon.http.pagination.page`)."""
    query = (
        sa.select(integrations)
        .where(integrations.c.user_id == user_id)
        .order_by(integrations.c.id.desc())
        .limit(limit + 1)
    )
    if cursor:
        query = query.where(integrations.c.id < cursor)
    return list(conn.execute(query))


def delete_integration(conn: Connection, user_id: str, integration_id: str) -> Row[Any]:
    """Delete it and its sealed secrets; the deleted row (to revoke its grant). Jobs still
    waiting for a file from it fail when a worker tries to fetch (INTEGRATION_ACCESS_DENIED)."""
    row = owned_integration(conn, user_id, integration_id)
    conn.execute(integrations.delete().where(integrations.c.id == integration_id))
    return row


def set_status(conn: Connection, integration_id: str, status: str, now: dt.datetime) -> None:
    conn.execute(
        integrations.update()
        .where(integrations.c.id == integration_id, integrations.c.status != status)
        .values(status=status, updated_at=now)
    )


def store_secrets(conn: Connection, integration_id: str, secrets_sealed: bytes, now: dt.datetime) -> None:
    """Replace the sealed secrets (a refreshed OAuth token), status unchanged."""
    conn.execute(
        integrations.update()
        .where(integrations.c.id == integration_id)
        .values(secrets_sealed=secrets_sealed, updated_at=now)
    )


def begin_authorization(conn: Connection, user_id: str, integration_id: str, nonce: str,
                        now: dt.datetime) -> Row[Any]:
    """Remember the nonce of a newly signed OAuth state: only that state may complete."""
    owned_integration(conn, user_id, integration_id)
    conn.execute(
        integrations.update().where(integrations.c.id == integration_id).values(oauth_nonce=nonce, updated_at=now)
    )
    return _row(conn, integration_id)


def complete_authorization(
    conn: Connection,
    *,
    user_id: str,
    integration_id: str,
    nonce: str,
    secrets_sealed: bytes,
    config: dict[str, Any],
    status: str,
    now: dt.datetime,
) -> Row[Any] | None:
    """Store the tokens of a finished OAuth flow, if `nonce` is still the integration's
    (else None: the state was used already, or superseded by a newer one)."""
    done = conn.execute(
        integrations.update()
        .where(
            integrations.c.id == integration_id,
            integrations.c.user_id == user_id,
            integrations.c.oauth_nonce == nonce,
        )
        .values(secrets_sealed=secrets_sealed, config=config, status=status, oauth_nonce=None, updated_at=now)
    )
    if done.rowcount != 1:
        return None
    return _row(conn, integration_id)
