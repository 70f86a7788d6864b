"""Webhook endpoints, deliveries and attempts. Each function is one unit of work run by
`Database.run`/`Database.read`. Deliveries are created by the outbox
(`daemon.storage.outbox`) with their event.

Every lookup is scoped to its owner: another user's endpoint or delivery does not
exist for the caller.

The dispatcher's queue: a PENDING or RETRYING delivery of an enabled endpoint is
due from `next_attempt_at`. `claim_due` leases due deliveries to one dispatcher
(PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so processes never claim the same row;
SQLite: under its single writer lock); `record_attempt` writes the outcome and
drops the lease in one transaction, and only if the lease is still held. A
delivery whose lease expired (its process died) is simply due again.

Deliveries of a disabled endpoint are left as they are, PENDING or RETRYING, and
are not claimed: they resume if the endpoint is enabled again. Deleting an
endpoint deletes its deliveries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from daemon.errors import Conflict, InvalidTransition, Missing
from daemon.storage.database import Wake, as_utc, lock_rows, serialize, wake_after_commit
from daemon.storage.ids import new_id
from daemon.storage.outbox import insert_delivery, record_event
from daemon.storage.repos.accounts import lock_user
from daemon.storage.tables import deliveries, delivery_attempts, events, schemas, webhook_endpoints
from daemon.webhooks.models import DUE_STATUSES, DeliveryStatus
from daemon.webhooks.records import ClaimedDelivery, Delivery, DeliveryAttempt, WebhookEndpoint

# Columns a PATCH may change.
UPDATABLE = frozenset({"url", "description", "delivery_mode", "events", "body_format", "custom_headers_sealed",
                       "enabled"})
DISABLED_BY_USER = "Disabled by its owner (enabled: false)"


# --- endpoints ---------------------------------------------------------------------------


def create_endpoint(
    conn: Connection,
    *,
    endpoint_id: str,
    user_id: str,
    url: str,
    description: str | None,
    delivery_mode: str,
    events: Sequence[str],
    body_format: str,
    custom_headers_sealed: bytes | None,
    secret_sealed: bytes,
    now: dt.datetime,
    max_endpoints: int,
) -> WebhookEndpoint:
    """Store a new, enabled endpoint (its settings already checked, its secret and headers sealed
    for `endpoint_id`).

    Raises:
        Conflict: the user already has `max_endpoints` (each event of theirs is one delivery
            per endpoint: without a bound, one job's events were thousands of sends).
    """
    lock_user(conn, user_id)
    held = conn.execute(sa.select(sa.func.count()).select_from(webhook_endpoints)
                        .where(webhook_endpoints.c.user_id == user_id)).scalar_one()
    if held >= max_endpoints:
        raise Conflict(f"At most {max_endpoints} webhook endpoints per user; delete one first")
    conn.execute(webhook_endpoints.insert().values(
        id=endpoint_id, user_id=user_id, url=url, description=description, delivery_mode=delivery_mode,
        events=list(events), body_format=body_format, custom_headers_sealed=custom_headers_sealed,
        secret_sealed=secret_sealed, enabled=True, consecutive_dead_deliveries=0, created_at=now, updated_at=now,
    ))
    return owned_endpoint(conn, user_id, endpoint_id)


def owned_endpoint(conn: Connection, user_id: str, endpoint_id: str, *, lock: bool = False) -> WebhookEndpoint:
    """The endpoint of `user_id`; `lock`: locked until the transaction ends, for a unit of
    work that changes it or adds deliveries to it.

    Under PostgreSQL's READ COMMITTED, what is read unlocked may change before the write:
    two rotations at once both kept the secret they read as the previous one, so the
    secret the first answer handed out never signed anything; a ping, send or replay
    whose endpoint was deleted meanwhile inserted a delivery of no endpoint (a foreign
    key violation, a 500). Locked, the second waits and sees what the first left
    (a deleted endpoint: 404). SQLite's writers already run one at a time.

    Raises:
        Missing: no such endpoint of `user_id` (also another user's).
    """
    query = sa.select(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id,
                                               webhook_endpoints.c.user_id == user_id)
    row = conn.execute(lock_rows(conn, query) if lock else query).first()
    if row is None:
        raise Missing("Webhook endpoint not found")
    return WebhookEndpoint.from_row(row)


def list_endpoints(conn: Connection, user_id: str, limit: int, cursor: str | None) -> list[WebhookEndpoint]:
    """Up to ``limit + 1`` endpoints of `user_id`, newest first, after `cursor`."""
    query = (sa.select(webhook_endpoints).where(webhook_endpoints.c.user_id == user_id)
             .order_by(webhook_endpoints.c.id.desc()).limit(limit + 1))
    if cursor:
        query = query.where(webhook_endpoints.c.id < cursor)
    return [WebhookEndpoint.from_row(row) for row in conn.execute(query)]


def bound_schemas(conn: Connection, user_id: str, endpoint_ids: Collection[str]) -> dict[str, list[str]]:
    """For each of `endpoint_ids`, the ids of the owner's live schemas bound to it (oldest first)."""
    out: dict[str, list[str]] = {endpoint_id: [] for endpoint_id in endpoint_ids}
    rows = conn.execute(
        sa.select(schemas.c.id, schemas.c.webhook_endpoint_ids)
        .where(schemas.c.user_id == user_id, schemas.c.deleted_at.is_(None))
        .order_by(schemas.c.id)
    )
    for schema_id, bound in rows:
        for endpoint_id in bound or ():
            if endpoint_id in out:
                out[endpoint_id].append(schema_id)
    return out


def update_endpoint(conn: Connection, user_id: str, endpoint_id: str, changes: Mapping[str, Any],
                    now: dt.datetime) -> WebhookEndpoint:
    """Apply `changes` (columns in `UPDATABLE`, already checked) to an endpoint of `user_id`.

    ``enabled: true`` re-enables it and resets its dead counter; ``enabled: false``
    disables it with a reason saying so.

    Raises:
        Missing: no such endpoint of `user_id`.
    """
    assert changes.keys() <= UPDATABLE, changes.keys() - UPDATABLE
    endpoint = owned_endpoint(conn, user_id, endpoint_id, lock=True)
    values = dict(changes)
    if values.get("enabled") is True:
        values |= {"disabled_reason": None, "consecutive_dead_deliveries": 0}
        if not endpoint.enabled:
            wake_after_commit(conn, Wake.DISPATCHER)  # its waiting deliveries are due again
    elif values.get("enabled") is False and endpoint.enabled:
        values["disabled_reason"] = DISABLED_BY_USER
    elif "enabled" in values and values["enabled"] == endpoint.enabled:
        del values["enabled"]
    if values:
        conn.execute(webhook_endpoints.update().where(webhook_endpoints.c.id == endpoint_id)
                     .values(**values, updated_at=now))
    return owned_endpoint(conn, user_id, endpoint_id)


def rotate_secret(conn: Connection, user_id: str, endpoint_id: str, *, new_sealed: bytes, now: dt.datetime,
                  overlap_s: int) -> None:
    """Make `new_sealed` the signing secret; the current one keeps signing for `overlap_s`.

    Raises:
        Missing: no such endpoint of `user_id`.
    """
    endpoint = owned_endpoint(conn, user_id, endpoint_id, lock=True)
    conn.execute(webhook_endpoints.update().where(webhook_endpoints.c.id == endpoint_id).values(
        secret_sealed=new_sealed,
        previous_secret_sealed=endpoint.secret_sealed if overlap_s > 0 else None,
        previous_secret_expires_at=now + dt.timedelta(seconds=overlap_s) if overlap_s > 0 else None,
        updated_at=now,
    ))


def delete_endpoint(conn: Connection, user_id: str, endpoint_id: str) -> None:
    """Delete the endpoint with its deliveries, and unbind it from the owner's schemas.

    Raises:
        Missing: no such endpoint of `user_id`.
    """
    serialize_bindings(conn, user_id)
    owned_endpoint(conn, user_id, endpoint_id, lock=True)
    bound = conn.execute(sa.select(schemas.c.id, schemas.c.webhook_endpoint_ids).where(schemas.c.user_id == user_id))
    for schema_id, ids in list(bound):
        if ids and endpoint_id in ids:
            conn.execute(schemas.update().where(schemas.c.id == schema_id)
                         .values(webhook_endpoint_ids=[i for i in ids if i != endpoint_id]))
    conn.execute(webhook_endpoints.delete().where(webhook_endpoints.c.id == endpoint_id))


def serialize_bindings(conn: Connection, user_id: str) -> None:
    """One change at a time to which endpoints `user_id`'s schemas are bound: deleting an
    endpoint rewrites each schema's list from what it read, and two such rewrites at once (two
    endpoints deleted, or one deleted while a schema is bound anew) each wrote the list
    without the other's change, leaving a schema bound to a deleted endpoint (its events then
    went to none) or unbinding what a PATCH had just bound. Taken first in its transaction."""
    serialize(conn, f"docex.bindings.{user_id}")


def unknown_endpoint_ids(conn: Connection, user_id: str, ids: Sequence[str]) -> list[int]:
    """Positions in `ids` that do not name an endpoint of `user_id`. The endpoints found are
    kept from being deleted until the transaction ends (PostgreSQL; SQLite's writers run one
    at a time), as a schema binds them: a delete racing the binding then either comes
    first (the id is unknown here) or waits and unbinds it, never leaving a schema bound to
    a deleted endpoint, whose jobs' events would go to no endpoint at all."""
    if not ids:
        return []
    query = (sa.select(webhook_endpoints.c.id)
             .where(webhook_endpoints.c.user_id == user_id, webhook_endpoints.c.id.in_(list(ids)))
             .order_by(webhook_endpoints.c.id))
    found = set(conn.execute(lock_rows(conn, query, key_share=True)).scalars())
    return [i for i, endpoint_id in enumerate(ids) if endpoint_id not in found]


# --- deliveries: creation ------------------------------------------------------------------


def send_event(conn: Connection, user_id: str, endpoint_id: str, *, type: str, data: dict[str, Any],
               now: dt.datetime) -> Delivery:
    """Record an event addressed to one endpoint (webhook.ping, a manual send) with its delivery.

    Raises:
        Missing: no such endpoint of `user_id`.
        InvalidTransition: the endpoint is disabled (nothing would be sent).
    """
    endpoint = owned_endpoint(conn, user_id, endpoint_id, lock=True)
    if not endpoint.enabled:
        raise InvalidTransition("Webhook endpoint is disabled; enable it with PATCH {\"enabled\": true} first")
    event_id = record_event(conn, user_id=user_id, type=type, data=data, now=now, endpoint_id=endpoint_id)
    return Delivery.from_row(conn.execute(sa.select(deliveries).where(deliveries.c.event_id == event_id)).one())


def replay(conn: Connection, user_id: str, delivery_id: str, now: dt.datetime) -> Delivery:
    """A new delivery (new id) of the same event to the same endpoint, due now. Any status may be
    replayed; a disabled endpoint's replay waits until the endpoint is enabled again.

    Raises:
        Missing: no such delivery of `user_id`.
    """
    original = owned_delivery(conn, user_id, delivery_id)
    owned_endpoint(conn, user_id, original.endpoint_id, lock=True)
    if not _kept_events(conn, [original.event_id]):
        raise Missing("Webhook delivery not found")  # its job was deleted meanwhile, and it with its event
    new = insert_delivery(conn, endpoint_id=original.endpoint_id, event_id=original.event_id,
                          event_type=original.event_type, now=now)
    return Delivery.from_row(conn.execute(sa.select(deliveries).where(deliveries.c.id == new)).one())


def recover(conn: Connection, user_id: str, endpoint_id: str, since: dt.datetime, now: dt.datetime,
            limit: int) -> tuple[list[Delivery], bool]:
    """Replay, oldest first, every DEAD delivery of the endpoint created at or after `since`
    whose event has not been delivered to it again since (by a replay or an earlier recovery):
    each failed event once, however often this is called. At most `limit` in one call.

    Returns:
        The new deliveries in the order of the originals, and whether more remain.

    Raises:
        Missing: no such endpoint of `user_id`.
    """
    owned_endpoint(conn, user_id, endpoint_id, lock=True)
    later = deliveries.alias("later")
    dead = conn.execute(
        sa.select(deliveries.c.event_id, deliveries.c.event_type)
        .where(deliveries.c.endpoint_id == endpoint_id, deliveries.c.status == DeliveryStatus.DEAD,
               deliveries.c.created_at >= since,
               ~sa.exists().where(later.c.endpoint_id == endpoint_id, later.c.event_id == deliveries.c.event_id,
                                  later.c.id > deliveries.c.id))
        .order_by(deliveries.c.created_at, deliveries.c.id)
        .limit(limit + 1)
    ).all()
    kept = _kept_events(conn, [row.event_id for row in dead[:limit]])
    new_ids = [insert_delivery(conn, endpoint_id=endpoint_id, event_id=row.event_id, event_type=row.event_type,
                               now=now) for row in dead[:limit] if row.event_id in kept]
    if not new_ids:
        return [], len(dead) > limit
    rows = conn.execute(sa.select(deliveries).where(deliveries.c.id.in_(new_ids)).order_by(deliveries.c.id))
    return [Delivery.from_row(row) for row in rows], len(dead) > limit


def _kept_events(conn: Connection, event_ids: list[str]) -> set[str]:
    """Which of `event_ids` still exist, kept from being deleted until the transaction ends. A
    job deleted meanwhile takes its delivered events along (`jobs.delete_job`): a new delivery
    of one then failed its foreign key (a 500), or was deleted with it after its 202."""
    if not event_ids:
        return set()
    query = sa.select(events.c.id).where(events.c.id.in_(event_ids)).order_by(events.c.id)
    return set(conn.execute(lock_rows(conn, query, key_share=True)).scalars())


# --- deliveries: reading -------------------------------------------------------------------


def owned_delivery(conn: Connection, user_id: str, delivery_id: str) -> Delivery:
    """A delivery to an endpoint of `user_id`.

    Raises:
        Missing: no such delivery of `user_id` (also another user's).
    """
    row = conn.execute(
        sa.select(deliveries)
        .join(webhook_endpoints, webhook_endpoints.c.id == deliveries.c.endpoint_id)
        .where(deliveries.c.id == delivery_id, webhook_endpoints.c.user_id == user_id)
    ).first()
    if row is None:
        raise Missing("Webhook delivery not found")
    return Delivery.from_row(row)


@dataclass(frozen=True)
class DeliveryFilter:
    status: str | None = None
    event_type: str | None = None


def list_deliveries(conn: Connection, user_id: str, endpoint_id: str, where: DeliveryFilter, limit: int,
                    cursor: str | None) -> list[Delivery]:
    """Up to ``limit + 1`` deliveries of an endpoint of `user_id`, newest first.

    Raises:
        Missing: no such endpoint of `user_id`.
    """
    owned_endpoint(conn, user_id, endpoint_id)
    query = (sa.select(deliveries).where(deliveries.c.endpoint_id == endpoint_id)
             .order_by(deliveries.c.id.desc()).limit(limit + 1))
    if where.status:
        query = query.where(deliveries.c.status == where.status)
    if where.event_type:
        query = query.where(deliveries.c.event_type == where.event_type)
    if cursor:
        query = query.where(deliveries.c.id < cursor)
    return [Delivery.from_row(row) for row in conn.execute(query)]


def list_attempts(conn: Connection, delivery_id: str) -> list[DeliveryAttempt]:
    """Every attempt of a delivery, oldest first."""
    return [DeliveryAttempt.from_row(row) for row in conn.execute(
        sa.select(delivery_attempts).where(delivery_attempts.c.delivery_id == delivery_id)
        .order_by(delivery_attempts.c.attempted_at, delivery_attempts.c.id)
    )]


# --- the dispatcher's queue ----------------------------------------------------------------


def _due(now: dt.datetime) -> sa.ColumnElement[bool]:
    return sa.and_(
        deliveries.c.status.in_(DUE_STATUSES),
        deliveries.c.next_attempt_at <= now,
        sa.or_(deliveries.c.lease_expires_at.is_(None), deliveries.c.lease_expires_at < now),
    )


def claim_due(
    conn: Connection,
    *,
    owner: str,
    now: dt.datetime,
    lease_s: float,
    limit: int,
    room: Mapping[str, int],
    default_room: int,
    user_room: Mapping[str, int],
    default_user_room: int,
) -> list[ClaimedDelivery]:
    """Lease up to `limit` due deliveries to `owner`, at most ``room[endpoint]`` (else
    `default_room`) per endpoint and ``user_room[user]`` (else `default_user_room`) per
    endpoints' owner; endpoints and users with no room are skipped. Each row carries what a
    send needs: the delivery, its endpoint's settings and sealed secrets, its event.

    PostgreSQL skips rows another process is claiming (FOR UPDATE SKIP LOCKED);
    SQLite runs this under its single writer lock (BEGIN IMMEDIATE).
    """
    query = (
        sa.select(deliveries.c.id, deliveries.c.endpoint_id, webhook_endpoints.c.user_id)
        .join(webhook_endpoints, webhook_endpoints.c.id == deliveries.c.endpoint_id)
        .where(_due(now), webhook_endpoints.c.enabled.is_(True))
        .order_by(deliveries.c.next_attempt_at, deliveries.c.id)
        # Candidates beyond `limit`, so one busy endpoint does not hide the others' deliveries.
        .limit(limit * 4)
    )
    query = _without(query, [endpoint_id for endpoint_id, free in room.items() if free <= 0],
                     [user_id for user_id, free in user_room.items() if free <= 0])
    query = lock_rows(conn, query, skip_locked=True, of=deliveries)
    taken: list[str] = []
    free, user_free = dict(room), dict(user_room)
    for delivery_id, endpoint_id, user_id in conn.execute(query):
        if len(taken) >= limit:
            break
        left, user_left = free.get(endpoint_id, default_room), user_free.get(user_id, default_user_room)
        if left > 0 and user_left > 0:
            taken.append(delivery_id)
            free[endpoint_id], user_free[user_id] = left - 1, user_left - 1
    if not taken:
        return []
    conn.execute(deliveries.update().where(deliveries.c.id.in_(taken)).values(
        lease_owner=owner, lease_expires_at=now + dt.timedelta(seconds=lease_s)))
    return [ClaimedDelivery.from_row(row) for row in conn.execute(
        sa.select(
            deliveries.c.id, deliveries.c.endpoint_id, webhook_endpoints.c.user_id, deliveries.c.event_id,
            deliveries.c.event_type,
            deliveries.c.attempts, deliveries.c.created_at,
            webhook_endpoints.c.url, webhook_endpoints.c.body_format,
            webhook_endpoints.c.custom_headers_sealed,
            webhook_endpoints.c.secret_sealed, webhook_endpoints.c.previous_secret_sealed,
            webhook_endpoints.c.previous_secret_expires_at,
            events.c.data, events.c.occurred_at,
        )
        .join(webhook_endpoints, webhook_endpoints.c.id == deliveries.c.endpoint_id)
        .join(events, events.c.id == deliveries.c.event_id)
        .where(deliveries.c.id.in_(taken))
        .order_by(deliveries.c.next_attempt_at, deliveries.c.id)
    )]


Q = TypeVar("Q", bound=sa.Select[Any])


def _without(query: Q, endpoint_ids: Collection[str], user_ids: Collection[str]) -> Q:
    """`query` (of deliveries joined to their endpoints) without those endpoints' and users'."""
    if endpoint_ids:
        query = query.where(deliveries.c.endpoint_id.not_in(list(endpoint_ids)))
    if user_ids:
        query = query.where(webhook_endpoints.c.user_id.not_in(list(user_ids)))
    return query


def next_due(conn: Connection, *, now: dt.datetime, skip_endpoints: Collection[str] = (),
             skip_users: Collection[str] = ()) -> dt.datetime | None:
    """When a delivery (of an endpoint not in `skip_endpoints`, of a user not in `skip_users`)
    may next be claimed: the earliest next attempt of an unleased one, or the earliest expiry of
    a held lease. None: nothing waits."""
    base = _without(sa.select().select_from(deliveries)
                    .join(webhook_endpoints, webhook_endpoints.c.id == deliveries.c.endpoint_id)
                    .where(deliveries.c.status.in_(DUE_STATUSES), webhook_endpoints.c.enabled.is_(True)),
                    skip_endpoints, skip_users)
    free = conn.execute(base.add_columns(sa.func.min(deliveries.c.next_attempt_at)).where(
        sa.or_(deliveries.c.lease_expires_at.is_(None), deliveries.c.lease_expires_at < now))).scalar()
    held = conn.execute(base.add_columns(sa.func.min(deliveries.c.lease_expires_at)).where(
        deliveries.c.lease_expires_at >= now)).scalar()
    times = [as_utc(v) for v in (free, held) if v is not None]
    return min(times) if times else None


@dataclass(frozen=True)
class Attempt:
    """One attempt as the dispatcher saw it."""

    at: dt.datetime
    duration_ms: int
    status_code: int | None
    error: str | None
    response_body: str | None


@dataclass(frozen=True)
class Recorded:
    """What recording an attempt changed beyond the delivery."""

    endpoint_disabled: bool = False


def record_attempt(
    conn: Connection,
    *,
    delivery_id: str,
    endpoint_id: str,
    owner: str,
    attempt: Attempt,
    status: DeliveryStatus,
    next_attempt_at: dt.datetime | None,
    auto_disable_threshold: int,
) -> Recorded | None:
    """Write one attempt and the delivery's new status, dropping the lease; None (nothing
    written) if `owner` no longer holds it (the endpoint was deleted, or the lease expired
    and another dispatcher took the delivery).

    A success resets the endpoint's dead counter; a DEAD delivery increments it, and the
    endpoint is disabled when it reaches `auto_disable_threshold`.
    """
    done = conn.execute(
        deliveries.update()
        .where(deliveries.c.id == delivery_id, deliveries.c.lease_owner == owner)
        .values(
            status=status, attempts=deliveries.c.attempts + 1, next_attempt_at=next_attempt_at,
            last_attempt_at=attempt.at, last_status_code=attempt.status_code, last_error=attempt.error,
            lease_owner=None, lease_expires_at=None,
        )
    )
    if done.rowcount != 1:
        return None
    if next_attempt_at is not None:
        wake_after_commit(conn, Wake.DISPATCHER)  # the dispatcher recomputes its sleep to the retry time
    conn.execute(delivery_attempts.insert().values(
        id=new_id(), delivery_id=delivery_id, attempted_at=attempt.at, duration_ms=attempt.duration_ms,
        status_code=attempt.status_code, error=attempt.error, response_body=attempt.response_body,
    ))
    endpoint = webhook_endpoints.c
    if status is DeliveryStatus.SUCCEEDED:
        conn.execute(webhook_endpoints.update()
                     .where(endpoint.id == endpoint_id, endpoint.consecutive_dead_deliveries != 0)
                     .values(consecutive_dead_deliveries=0))
    elif status is DeliveryStatus.DEAD:
        conn.execute(webhook_endpoints.update().where(endpoint.id == endpoint_id)
                     .values(consecutive_dead_deliveries=endpoint.consecutive_dead_deliveries + 1))
        reason = (f"Disabled automatically after {auto_disable_threshold} consecutive dead deliveries "
                  f"(WEBHOOK_AUTO_DISABLE_THRESHOLD); last error: {attempt.error}")[:500]
        disabled = conn.execute(
            webhook_endpoints.update()
            .where(endpoint.id == endpoint_id, endpoint.enabled.is_(True),
                   endpoint.consecutive_dead_deliveries >= auto_disable_threshold)
            .values(enabled=False, disabled_reason=reason, updated_at=attempt.at)
        )
        return Recorded(endpoint_disabled=disabled.rowcount == 1)
    return Recorded()


def release(conn: Connection, *, delivery_ids: Sequence[str], owner: str) -> int:
    """Give back deliveries claimed but not sent (shutdown): due again at once, no attempt counted."""
    if not delivery_ids:
        return 0
    return conn.execute(
        deliveries.update()
        .where(deliveries.c.id.in_(list(delivery_ids)), deliveries.c.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None)
    ).rowcount

