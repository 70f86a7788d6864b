"""Two transactions of PostgreSQL's READ COMMITTED interleaved by hand, where each read a row
in one statement and wrote from it in another, or wrote what its snapshot did not see: the
first is held open while the second runs, then committed. SQLite runs one writer at a time,
so neither race exists there."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
import trio
from jobs_helpers import completed_run, create_schema, user_id_of

from daemon.clock import utcnow
from daemon.errors import Missing
from daemon.storage.outbox import record_event
from daemon.storage.repos import accounts, jobs, schemas, webhooks
from daemon.storage.tables import deliveries, job_runs, sessions
from daemon.storage.tables import jobs as jobs_table
from daemon.storage.tables import schemas as schemas_table

pytestmark = pytest.mark.skipif(not os.environ.get("DOCEX_TEST_DATABASE_URL"),
                                reason="row locks and READ COMMITTED snapshots are PostgreSQL's")


async def while_held(services: Any, first: Callable[[sa.Connection], Any],
                     second: Callable[[sa.Connection], Any]) -> None:
    """`first` in a transaction held open while `second` runs in another (committed as soon as
    it can), then `first` committed; waits for both."""
    engine = sa.create_engine(services.config.database.url)
    try:
        with engine.connect() as held:
            transaction = held.begin()
            first(held)

            def other() -> None:
                with engine.begin() as conn:
                    second(conn)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, other)
                await trio.sleep(0.5)  # the second waits for a lock the first holds, or has run
                transaction.commit()
    finally:
        engine.dispose()


async def test_a_logout_everywhere_ends_a_session_a_refresh_makes_at_the_same_moment(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    """Before: the refresh's new session was not in the snapshot of the logout's UPDATE, and
    outlived its 204."""
    user_id = await user_id_of(client, alice)
    now = utcnow()
    await services.db.run(lambda conn: accounts.create_session(
        conn, user_id=user_id, refresh_hash="old-refresh", now=now, ttl_s=3600, user_agent=None, ip=None))

    def refresh(conn: sa.Connection) -> None:
        rotation = accounts.rotate_session(conn, refresh_hash="old-refresh", new_refresh_hash="new-refresh",
                                           now=now, ttl_s=3600, user_agent=None, ip=None)
        assert rotation.outcome is accounts.RotateOutcome.ROTATED

    await while_held(services, refresh,
                     lambda conn: accounts.revoke_user_sessions(conn, user_id, now + dt.timedelta(seconds=1)))
    alive = await services.db.read(lambda conn: conn.execute(sa.select(sessions.c.refresh_hash).where(
        sessions.c.user_id == user_id, sessions.c.revoked_at.is_(None))).scalars().all())
    assert alive == []


async def test_two_endpoints_deleted_at_once_are_both_unbound_from_a_schema(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    """Before: each delete rewrote the schema's list from what it read, without the other's
    change: the schema stayed bound to a deleted endpoint, and its events went to none."""
    user_id = await user_id_of(client, alice)
    now = utcnow()

    def setup(conn: sa.Connection) -> str:
        for endpoint_id in ("endpoint-a", "endpoint-b"):
            webhooks.create_endpoint(conn, endpoint_id=endpoint_id, user_id=user_id, url="https://example.com/hook",
                                     description=None, delivery_mode="AUTOMATIC", events=["job.completed"],
                                     body_format="JSON", custom_headers_sealed=None, secret_sealed=b"sealed", now=now,
                                     max_endpoints=25)
        row = schemas.create_schema(conn, user_id=user_id, name="Bound", description=None,
                                    definition={"type": "object", "properties": {"a": {"type": "string"}}},
                                    webhook_endpoint_ids=["endpoint-a", "endpoint-b"], now=now)
        return str(row.id)

    schema_id = await services.db.run(setup)
    await while_held(services, lambda conn: webhooks.delete_endpoint(conn, user_id, "endpoint-a"),
                     lambda conn: webhooks.delete_endpoint(conn, user_id, "endpoint-b"))
    bound = await services.db.read(lambda conn: conn.execute(sa.select(schemas_table.c.webhook_endpoint_ids).where(
        schemas_table.c.id == schema_id)).scalar_one())
    assert bound == []


async def delivered_job(client: Any, services: Any, auth: dict[str, str]) -> tuple[str, str, str]:
    """(user id, job id, delivery id) of a COMPLETED job whose job.completed event was delivered."""
    user_id = await user_id_of(client, auth)
    schema_id = await create_schema(client, auth)
    run_id = await completed_run(client, services, auth, schema_id, [{"invoiceNumber": "A-1"}])
    now = utcnow()

    def deliver(conn: sa.Connection) -> tuple[str, str]:
        job_id = conn.execute(sa.select(jobs_table.c.id).where(jobs_table.c.job_run_id == run_id)).scalar_one()
        endpoint = webhooks.create_endpoint(
            conn, endpoint_id="endpoint-r", user_id=user_id, url="https://example.com/hook", description=None,
            delivery_mode="AUTOMATIC", events=["job.completed"], body_format="JSON", custom_headers_sealed=None,
            secret_sealed=b"sealed", now=now, max_endpoints=25)
        record_event(conn, user_id=user_id, type="job.completed", data={}, now=now, schema_id=schema_id,
                     job_id=job_id, endpoint_id=endpoint.id)
        conn.execute(deliveries.update().values(status="SUCCEEDED"))
        conn.execute(job_runs.update().values(status="COMPLETED"))
        return job_id, conn.execute(sa.select(deliveries.c.id)).scalar_one()

    job_id, delivery_id = await services.db.run(deliver)
    return user_id, job_id, delivery_id


async def test_a_replay_committed_while_its_job_is_deleted_is_sent(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    """Before: the delete waited for the replay's new delivery, re-checked only the event's own
    row, and deleted the event, and the acknowledged delivery with it."""
    user_id, job_id, delivery_id = await delivered_job(client, services, alice)
    replayed: list[str] = []
    await while_held(services,
                     lambda conn: replayed.append(webhooks.replay(conn, user_id, delivery_id, utcnow()).id),
                     lambda conn: jobs.delete_job(conn, user_id, job_id, utcnow()))
    pending = await services.db.read(lambda conn: conn.execute(
        sa.select(deliveries.c.id).where(deliveries.c.status == "PENDING")).scalars().all())
    assert pending == replayed


async def test_a_replay_of_a_delivery_whose_job_is_being_deleted_is_not_found(
        client: Any, services: Any, alice: dict[str, str]) -> None:
    """Before: the replay's new delivery failed its foreign key once the delete committed: a 500."""
    user_id, job_id, delivery_id = await delivered_job(client, services, alice)
    outcome: list[BaseException] = []

    def replay(conn: sa.Connection) -> None:
        try:
            webhooks.replay(conn, user_id, delivery_id, utcnow())
        except Exception as exc:
            outcome.append(exc)

    await while_held(services, lambda conn: jobs.delete_job(conn, user_id, job_id, utcnow()), replay)
    assert len(outcome) == 1 and isinstance(outcome[0], Missing), outcome
