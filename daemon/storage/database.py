"""The one SQLAlchemy engine, and `Database.run` to use it from trio.

Database work is synchronous and small: a repository function takes a
`Connection`, and `Database.run(fn, *args)` runs it as one transaction in a
worker thread, gated by a `trio.CapacityLimiter` the size of the pool so that
trio never queues more threads than there are connections.

A thread cannot be cancelled: a cancelled caller waits for its transaction to
commit or roll back, so a transaction is never cut in half.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
import trio
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

P = ParamSpec("P")
T = TypeVar("T")


class Database:
    """The shared engine plus the dialect's capabilities, computed once."""

    def __init__(self, url: str, *, pool_size: int = 10, busy_timeout_ms: int = 5000) -> None:
        self.url = sa.make_url(url)
        if self.url.drivername == "postgresql":
            self.url = self.url.set(drivername="postgresql+psycopg")
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        self.is_postgres = self.url.get_backend_name() == "postgresql"
        if not (self.is_sqlite or self.is_postgres):
            raise ValueError(f"unsupported database {self.url.get_backend_name()!r}: use sqlite or postgresql")
        # SQLite has no row locks: claims serialise on its single writer instead.
        self.supports_skip_locked = self.is_postgres
        self.engine = self._create_engine(pool_size, busy_timeout_ms)
        self.limiter = trio.CapacityLimiter(pool_size)

    def _create_engine(self, pool_size: int, busy_timeout_ms: int) -> Engine:
        if self.is_postgres:
            return sa.create_engine(
                self.url, pool_size=pool_size, max_overflow=0, pool_pre_ping=True, pool_recycle=1800
            )
        connect_args = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
        if self.url.database in (None, "", ":memory:"):
            # One in-memory database exists per connection: share a single one.
            engine = sa.create_engine(self.url, poolclass=sa.StaticPool, connect_args=connect_args)
        else:
            engine = sa.create_engine(self.url, pool_size=pool_size, max_overflow=0, connect_args=connect_args)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # Let SQLAlchemy's "begin" event below issue BEGIN itself (pysqlite would defer it).
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Connection) -> None:
            # A writer takes the write lock up front (IMMEDIATE), so the busy timeout applies: a
            # deferred transaction that upgrades from read to write fails at once with "database is
            # locked". Readers stay deferred and, under WAL, never wait for a writer.
            readonly = conn.get_execution_options().get("docex_readonly", False)
            # Straight to the driver: exec_driver_sql runs SQLAlchemy's whole execution path
            # (events, cursor result) for a statement that returns nothing.
            driver = conn.connection.driver_connection
            assert driver is not None
            driver.execute("BEGIN" if readonly else "BEGIN IMMEDIATE")

        return engine

    async def run(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(conn, *args, **kwargs)`` in one transaction off the trio thread.

        Commits if `fn` returns, rolls back if it raises (the exception propagates).
        """

        return await self._in_thread(False, fn, *args, **kwargs)

    async def read(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Like `run`, for a unit of work that only reads (SQLite then takes no write lock)."""
        return await self._in_thread(True, fn, *args, **kwargs)

    async def _in_thread(
        self, readonly: bool, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        def unit_of_work() -> T:
            with self.engine.connect() as conn:
                conn = conn.execution_options(docex_readonly=readonly)
                with conn.begin():
                    return fn(conn, *args, **kwargs)

        return await trio.to_thread.run_sync(unit_of_work, limiter=self.limiter)

    async def ping(self) -> None:
        await self.read(lambda conn: conn.execute(sa.text("SELECT 1")).scalar_one())

    def dispose(self) -> None:
        self.engine.dispose()
