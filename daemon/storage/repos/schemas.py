"""Schemas (SPEC §5): a user's extraction schemas, soft-deleted. Each function is one unit
of work run by `Database.run`/`Database.read`; definitions are checked before they get
here (`daemon.schemas.definition.check_definition`).

Every lookup is scoped to its owner: another user's schema does not exist for the caller.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from daemon.errors import BadRequest
from daemon.storage.database import lock_rows, stamped_after
from daemon.storage.ids import new_id
from daemon.storage.repos.webhooks import serialize_bindings, unknown_endpoint_ids
from daemon.storage.tables import schemas

# Columns a PATCH may change.
UPDATABLE = frozenset({"name", "description", "definition", "webhook_endpoint_ids"})


def check_endpoint_ids(conn: Connection, user_id: str, ids: Sequence[str]) -> list[str]:
    """Problems with binding webhook endpoints `ids` to a schema of `user_id`; empty if none.

    Each id must name one of the caller's own endpoints; a problem reads
    ``webhookEndpointIds[1] is not one of your webhook endpoints``.
    """
    return [f"webhookEndpointIds[{i}] is not one of your webhook endpoints"
            for i in unknown_endpoint_ids(conn, user_id, ids)]


def create_schema(conn: Connection, *, user_id: str, name: str, description: str | None,
                  definition: dict[str, Any], webhook_endpoint_ids: Sequence[str], now: dt.datetime) -> Row[Any]:
    """Store a new schema.

    Raises:
        BadRequest: a webhook endpoint id is not the caller's (`check_endpoint_ids`).
    """
    problems = check_endpoint_ids(conn, user_id, webhook_endpoint_ids)
    if problems:
        raise BadRequest(problems)
    schema_id = new_id()
    conn.execute(schemas.insert().values(
        id=schema_id, user_id=user_id, name=name, description=description, definition=definition,
        webhook_endpoint_ids=list(webhook_endpoint_ids), created_at=now, updated_at=now,
    ))
    return conn.execute(sa.select(schemas).where(schemas.c.id == schema_id)).one()


def get_schema(conn: Connection, user_id: str, schema_id: str, *, include_deleted: bool = False) -> Row[Any] | None:
    """The schema `schema_id` of `user_id`; None if it is another user's, unknown, or deleted
    (unless `include_deleted`: jobs queued before the delete still find it, and fail)."""
    query = sa.select(schemas).where(schemas.c.id == schema_id, schemas.c.user_id == user_id)
    if not include_deleted:
        query = query.where(schemas.c.deleted_at.is_(None))
    return conn.execute(query).first()


def list_schemas(conn: Connection, user_id: str, limit: int, cursor: str | None) -> list[Row[Any]]:
    """Up to ``limit + 1`` schemas of `user_id` that are not deleted, newest first, after `cursor`."""
    query = (sa.select(schemas).where(schemas.c.user_id == user_id, schemas.c.deleted_at.is_(None))
             .order_by(schemas.c.id.desc()).limit(limit + 1))
    if cursor:
        query = query.where(schemas.c.id < cursor)
    return list(conn.execute(query))


def update_schema(conn: Connection, user_id: str, schema_id: str, changes: dict[str, Any],
                  now: dt.datetime) -> Row[Any] | None:
    """Apply `changes` (columns in `UPDATABLE`) to a live schema of `user_id`; None if there is none.

    Raises:
        BadRequest: a webhook endpoint id is not the caller's (`check_endpoint_ids`).
    """
    assert changes.keys() <= UPDATABLE, changes.keys() - UPDATABLE
    if "webhook_endpoint_ids" in changes:
        serialize_bindings(conn, user_id)
    live = (schemas.c.id == schema_id, schemas.c.user_id == user_id, schemas.c.deleted_at.is_(None))
    # Locked, so that of two changes at once the one written last is stamped last.
    current = conn.execute(lock_rows(conn, sa.select(schemas.c.updated_at).where(*live))).first()
    if current is None:
        return None
    if "webhook_endpoint_ids" in changes:
        problems = check_endpoint_ids(conn, user_id, changes["webhook_endpoint_ids"])
        if problems:
            raise BadRequest(problems)
        changes = {**changes, "webhook_endpoint_ids": list(changes["webhook_endpoint_ids"])}
    if changes:
        conn.execute(schemas.update().where(*live).values(**changes, updated_at=stamped_after(current.updated_at, now)))
    return get_schema(conn, user_id, schema_id)


def delete_schema(conn: Connection, user_id: str, schema_id: str, now: dt.datetime) -> bool:
    """Soft-delete a live schema of `user_id`; False if there is none."""
    result = conn.execute(schemas.update()
                          .where(schemas.c.id == schema_id, schemas.c.user_id == user_id,
                                 schemas.c.deleted_at.is_(None))
                          .values(deleted_at=now, updated_at=now))
    return result.rowcount == 1
