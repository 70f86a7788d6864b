"""The database layer wakes the workers and the dispatcher after commit, never after a rollback.

A real database (SQLite, or PostgreSQL with DOCEX_TEST_DATABASE_URL): `Database.run` is
what commits, and the wake-up must follow the commit, not the call.
"""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from daemon.clock import utcnow
from daemon.services import Services
from daemon.storage.database import Database, as_utc
from daemon.storage.ids import new_id
from daemon.storage.outbox import record_event
from daemon.storage.repos import accounts
from daemon.storage.repos import jobs as jobs_repo
from daemon.storage.repos import schemas as schemas_repo
from daemon.storage.repos import webhooks as webhooks_repo
from daemon.storage.repos.jobs import NewJob
from daemon.storage.tables import events


class Boom(Exception):
    pass


async def woken(db: Database) -> tuple[bool, bool]:
    """Whether (workers, dispatcher) were woken since the last look; resets both."""
    return await db.jobs_due.sleep(0), await db.deliveries_due.sleep(0)


async def owner_with_endpoint(services: Services) -> tuple[str, str]:
    def unit(conn: sa.Connection) -> tuple[str, str]:
        user = accounts.create_user(conn, email="a@example.com", name="A", password_hash="x", now=utcnow())
        webhooks_repo.create_endpoint(
            conn, endpoint_id=new_id(), user_id=user.id, url="https://example.com/hook", description=None,
            delivery_mode="AUTOMATIC", events=["*"], body_format="JSON", custom_headers_sealed=None,
            secret_sealed=b"sealed", now=utcnow(), max_endpoints=1,
        )
        schema = schemas_repo.create_schema(conn, user_id=user.id, name="S", description=None,
                                            definition={"fields": []}, webhook_endpoint_ids=[], now=utcnow())
        return str(user.id), str(schema.id)

    user_id, schema_id = await services.db.run(unit)
    await woken(services.db)
    return user_id, schema_id


async def test_a_committed_event_wakes_the_dispatcher_only(services: Services) -> None:
    user_id, _ = await owner_with_endpoint(services)
    await services.db.run(lambda c: record_event(c, user_id=user_id, type="job.failed", data={}, now=utcnow()))
    assert await woken(services.db) == (False, True)


async def test_a_committed_job_wakes_the_workers_and_the_dispatcher(services: Services) -> None:
    user_id, schema_id = await owner_with_endpoint(services)
    new = NewJob(file_name="a.txt", file_size=1, mime_type="text/plain", sha256="0" * 64, blob_key="k")
    await services.db.run(jobs_repo.create_job, user_id=user_id, schema_id=schema_id, new=new, now=utcnow())
    assert await woken(services.db) == (True, True)


async def test_a_rolled_back_transaction_wakes_nothing(services: Services) -> None:
    user_id, schema_id = await owner_with_endpoint(services)
    new = NewJob(file_name="a.txt", file_size=1, mime_type="text/plain", sha256="0" * 64, blob_key="k")

    def unit(conn: sa.Connection) -> None:
        jobs_repo.create_job(conn, user_id=user_id, schema_id=schema_id, new=new, now=utcnow())
        raise Boom

    with pytest.raises(Boom):
        await services.db.run(unit)
    assert await woken(services.db) == (False, False)
    assert await services.db.read(lambda c: c.execute(sa.select(sa.func.count()).select_from(events)).scalar()) == 0
    # The marks of the rolled-back unit stay behind on no pooled connection: the next unit,
    # which changes nothing to wake for, wakes nothing either.
    for _ in range(services.config.database.pool_size + 1):
        await services.db.run(lambda c: c.execute(sa.select(1)).scalar())
    assert await woken(services.db) == (False, False)


def test_times_read_outside_a_column_type_become_aware_utc() -> None:
    """One conversion for both queues: SQLite's min() is naive ISO text, PostgreSQL's is aware
    in the session's time zone; both come back as the same aware UTC instant."""
    utc = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    paris = utc.astimezone(dt.timezone(dt.timedelta(hours=1)))
    for value in ("2026-01-02 03:04:05.678000", utc.replace(tzinfo=None), utc, paris):
        got = as_utc(value)
        assert got == utc and got.tzinfo is dt.UTC
    with pytest.raises(TypeError):
        as_utc(42)
