"""The engine and migrations, on whichever backend the suite runs against."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa
import trio
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from daemon.storage.database import Database
from daemon.storage.migrate import HEAD, current_revision, head_revision, upgrade
from daemon.storage.tables import metadata


async def test_migrated_schema_equals_the_declared_tables(services) -> None:
    def diff(conn: sa.Connection) -> list[object]:
        return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)

    assert await services.db.read(diff) == []
    assert await services.db.read(current_revision) == head_revision()


async def test_upgrade_twice_is_a_no_op(services) -> None:
    await trio.to_thread.run_sync(upgrade, services.db.engine)
    assert await services.db.read(current_revision) == head_revision()


def test_head_names_the_newest_migration() -> None:
    assert head_revision() == HEAD


def test_starting_on_an_up_to_date_database_does_not_load_alembic(database_url: str) -> None:
    probe = (
        "import sys\n"
        "from daemon.storage.database import Database\n"
        "from daemon.storage.migrate import upgrade\n"
        f"upgrade(Database({database_url!r}, pool_size=1).engine)\n"
        "print('alembic' in sys.modules)\n"
    )
    runs = [subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
            for _ in range(2)]
    assert runs == ["True", "False"]  # the first start migrates, the next only reads alembic_version


async def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'x.db'}", busy_timeout_ms=1234)
    try:
        mode = await db.read(lambda c: c.exec_driver_sql("PRAGMA journal_mode").scalar_one())
        timeout = await db.read(lambda c: c.exec_driver_sql("PRAGMA busy_timeout").scalar_one())
        assert (mode, timeout) == ("wal", 1234)
    finally:
        db.dispose()


async def test_a_failing_unit_of_work_rolls_back(services) -> None:
    def setup(conn: sa.Connection) -> None:
        conn.execute(sa.text("CREATE TABLE scratch (n INTEGER)"))

    def insert_then_fail(conn: sa.Connection) -> None:
        conn.execute(sa.text("INSERT INTO scratch VALUES (1)"))
        raise ValueError("boom")

    await services.db.run(setup)
    with pytest.raises(ValueError, match="boom"):
        await services.db.run(insert_then_fail)
    assert await services.db.read(lambda c: c.execute(sa.text("SELECT count(*) FROM scratch")).scalar_one()) == 0


async def test_concurrent_writers_never_see_database_is_locked(services) -> None:
    """Many trio tasks writing at once through the limiter all commit (SQLite: BEGIN IMMEDIATE)."""
    await services.db.run(lambda c: c.execute(sa.text("CREATE TABLE counter (n INTEGER)")))

    def bump(conn: sa.Connection) -> None:
        n = conn.execute(sa.text("SELECT count(*) FROM counter")).scalar_one()
        conn.execute(sa.text("INSERT INTO counter VALUES (:n)"), {"n": n})

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(services.db.run, bump)
    assert await services.db.read(lambda c: c.execute(sa.text("SELECT count(*) FROM counter")).scalar_one()) == 40
