"""The outbox: events and the webhook deliveries they create, written in the changing
transaction.

Every state change calls `record_event` inside the same transaction as the change,
so an event exists if and only if its change committed: a crash can delay a
webhook, never lose one (SPEC §9). The event's deliveries are created in that same
transaction (routing: `daemon.webhooks.routing`), and the transaction is marked so
that `Database.run` wakes the dispatcher once it has committed (`wake_after_commit`).

The catalog of event types is `daemon.events`, a pure module.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from daemon.events import CATALOG
from daemon.storage.database import Wake, lock_rows, wake_after_commit
from daemon.storage.ids import new_id
from daemon.storage.tables import deliveries, events, schemas, webhook_endpoints
from daemon.webhooks.models import DeliveryMode, DeliveryStatus
from daemon.webhooks.routing import Subscriber, route


def record_event(conn: Connection, *, user_id: str, type: str, data: dict[str, Any], now: dt.datetime,
                 schema_id: str | None = None, job_id: str | None = None,
                 job_run_id: str | None = None, endpoint_id: str | None = None) -> str:
    """Write one event into the outbox with its deliveries; returns its id. Call inside the
    changing transaction.

    The event goes to the endpoints routing picks, or, given `endpoint_id` (webhook.ping,
    manual sends, whose type the caller has checked), to that endpoint only.
    """
    if endpoint_id is None and type not in CATALOG:
        raise ValueError(f"unknown event type {type!r}")
    event_id = new_id()
    conn.execute(events.insert().values(
        id=event_id, user_id=user_id, type=type, data=data, occurred_at=now,
        schema_id=schema_id, job_id=job_id, job_run_id=job_run_id,
    ))
    if endpoint_id is None:
        _enqueue_routed(conn, event_id=event_id, user_id=user_id, event_type=type, schema_id=schema_id, now=now)
    else:
        insert_delivery(conn, endpoint_id=endpoint_id, event_id=event_id, event_type=type, now=now)
    return event_id


def insert_delivery(conn: Connection, *, endpoint_id: str, event_id: str, event_type: str,
                    now: dt.datetime) -> str:
    """A new delivery of an event to an endpoint, due now (the dispatcher is woken once the
    transaction commits); returns its id."""
    delivery_id = new_id()
    conn.execute(deliveries.insert().values(
        id=delivery_id, endpoint_id=endpoint_id, event_id=event_id, event_type=event_type,
        status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=now, created_at=now,
    ))
    wake_after_commit(conn, Wake.DISPATCHER)
    return delivery_id


def _enqueue_routed(conn: Connection, *, event_id: str, user_id: str, event_type: str, schema_id: str | None,
                    now: dt.datetime) -> list[str]:
    """Create the deliveries of a new event to the endpoints routing picks; returns their ids."""
    bound: list[str] = []
    if schema_id is not None:
        # A deleted schema still binds: jobs queued on it before the delete end with events.
        bound = list(conn.execute(sa.select(schemas.c.webhook_endpoint_ids).where(
            schemas.c.id == schema_id, schemas.c.user_id == user_id)).scalar() or [])
    query = sa.select(webhook_endpoints.c.id, webhook_endpoints.c.delivery_mode, webhook_endpoints.c.events).where(
        webhook_endpoints.c.user_id == user_id, webhook_endpoints.c.enabled.is_(True))
    if bound:
        query = query.where(webhook_endpoints.c.id.in_(bound))
    else:
        query = query.where(webhook_endpoints.c.delivery_mode == DeliveryMode.AUTOMATIC)
    # Kept from being deleted until this transaction ends (PostgreSQL; SQLite's writers run one
    # at a time): an endpoint deleted between this read and the inserts below would make them
    # violate their foreign key and roll back the change itself (a job's creation answered
    # 500, a worker's result lost until its lease expired). A key-share lock waits for a
    # delete in progress and skips the row if it committed; events of one user do not wait
    # for each other.
    query = lock_rows(conn, query.order_by(webhook_endpoints.c.id), key_share=True)
    subscribers = [Subscriber(id=row.id, enabled=True, mode=row.delivery_mode, patterns=row.events)
                   for row in conn.execute(query)]
    return [insert_delivery(conn, endpoint_id=endpoint_id, event_id=event_id, event_type=event_type, now=now)
            for endpoint_id in route(event_type, subscribers, bound)]
