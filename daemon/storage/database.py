"""The one SQLAlchemy engine, and `Database.run` to use it from trio.

Database work is synchronous and small: a repository function takes a
`Connection`, and `Database.run(fn, *args)` runs it as one transaction in a
worker thread, gated by a `trio.CapacityLimiter` the size of the pool so that
trio never queues more threads than there are connections.

A thread cannot be cancelled: a cancelled caller waits for its transaction to
commit or roll back, so a transaction is never cut in half.

Wake-ups after commit: a unit of work that makes a job claimable or a webhook
delivery due calls `wake_after_commit` (the outbox and the job repository do;
routes never do). `Database.run` sets the matching `Wakeup` once, and only if,
the transaction committed, so an idle worker or dispatcher of this process
acts at once and a rolled-back change wakes nothing. Other processes notice by
their slow poll.
"""

from __future__ import annotations

import datetime as dt
import enum
import sqlite3
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

import sqlalchemy as sa
import trio
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql import Select

from daemon.wakeup import Wakeup

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S", bound=Select[Any])
# The key in `Connection.info` where a unit of work collects what to wake after its commit.
# `info` belongs to the pooled DBAPI connection and outlives the transaction: each unit of
# work starts by clearing it.
_WAKE_KEY = "docex.wake"


class Wake(enum.Flag):
    """Who to wake once the current transaction commits."""

    NONE = 0
    WORKERS = enum.auto()  # a job became claimable (or its due time moved)
    DISPATCHER = enum.auto()  # a webhook delivery became due (or its due time moved)
    JOB_ENDED = enum.auto()  # a job ended: an inbox may move its file into done/ or failed/


def wake_after_commit(conn: Connection, wake: Wake) -> None:
    """Wake this process's idle workers and/or dispatcher once `conn`'s transaction commits
    (nothing if it rolls back). Call inside a unit of work run by `Database.run`."""
    conn.info[_WAKE_KEY] = conn.info.get(_WAKE_KEY, Wake.NONE) | wake


def lock_rows(conn: Connection, query: S, *, skip_locked: bool = False, of: Any = None,
              key_share: bool = False) -> S:
    """`query` with FOR UPDATE [SKIP LOCKED] on a database with row locks (PostgreSQL).
    `key_share`: FOR KEY SHARE instead, which only keeps the rows from being deleted (or
    their keys changed) until the transaction ends, as a foreign key to them would, and
    lets any number of such transactions hold them at once.

    SQLite has none: every writer runs under its single write lock (BEGIN IMMEDIATE), so
    the rows a writer reads cannot change under it and the query is returned unchanged.
    """
    if not _has_row_locks(conn):
        return query
    if key_share:
        return query.with_for_update(read=True, key_share=True, skip_locked=skip_locked, of=of)
    return query.with_for_update(skip_locked=skip_locked, of=of)


def stamped_after(previous: dt.datetime, now: dt.datetime) -> dt.datetime:
    """`now`, or just after a locked row's last change (`previous`) if that is later: writes to
    one row take their time before they queue for its lock, so the one that committed last
    could carry the older updatedAt (20 corrections of a job at once: the final result was not
    the newest-stamped one, and receivers ordering by time kept a stale one)."""
    return max(now, as_utc(previous) + dt.timedelta(milliseconds=1))  # the API shows milliseconds


def as_utc(value: object) -> dt.datetime:
    """An aware UTC datetime from a time the database returned outside a column's type:
    ``min()`` over a SQLite column comes back as ISO text, naive; PostgreSQL's is aware,
    in the session's time zone."""
    parsed = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if not isinstance(parsed, dt.datetime):
        raise TypeError(f"not a time: {value!r}")
    return parsed.replace(tzinfo=dt.UTC) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)


def serialize(conn: Connection, name: str) -> None:
    """Let one transaction at a time past this point for `name` (until it ends).

    PostgreSQL: a transaction-scoped advisory lock. SQLite: nothing to do, its writers
    already run one at a time.
    """
    if _has_row_locks(conn):
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": name})


def _has_row_locks(conn: Connection) -> bool:
    # The one dialect check of the repositories: PostgreSQL locks rows, SQLite the whole database.
    return conn.dialect.name == "postgresql"


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
        self.engine = self._create_engine(pool_size, busy_timeout_ms)
        self.limiter = trio.CapacityLimiter(pool_size)
        # Set after a commit that made a job claimable: an idle worker claims it at once.
        self.jobs_due = Wakeup()
        # Set after a commit that made a delivery due: the dispatcher sends it at once.
        self.deliveries_due = Wakeup()
        # Set after a commit that ended a job: the inbox sweeper moves its file aside.
        self.jobs_ended = Wakeup()

    def _create_engine(self, pool_size: int, busy_timeout_ms: int) -> Engine:
        # hide_parameters: an error's message (and so its log line) never carries the values
        # bound to a statement: token hashes, addresses, a document's values.
        if self.is_postgres:
            # Named in pg_stat_activity (an operator sees which connections are docex's), unless
            # the URL names them itself.
            named = {} if "application_name" in self.url.query else {"application_name": "docex"}
            # A database that stops answering (a partition, a dead host) must end a call, not
            # hold its thread for ever: the daemon could not stop. libpq's connect timeout, TCP
            # keepalives for an idle socket and a TCP user timeout for unacknowledged sends
            # bound it to about a minute; the URL's own values win.
            timeouts = {"connect_timeout": 10, "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                        "keepalives_count": 3, "tcp_user_timeout": 60_000}
            connect_args = {**{k: v for k, v in timeouts.items() if k not in self.url.query}, **named}
            return sa.create_engine(
                self.url, pool_size=pool_size, max_overflow=0, pool_pre_ping=True, pool_recycle=1800,
                connect_args=connect_args, hide_parameters=True,
            )
        connect_args = {"check_same_thread": False, "timeout": busy_timeout_ms / 1000}
        if self.url.database in (None, "", ":memory:"):
            # One in-memory database exists per connection: share a single one.
            engine = sa.create_engine(self.url, poolclass=sa.StaticPool, connect_args=connect_args,
                                      hide_parameters=True)
        else:
            engine = sa.create_engine(self.url, pool_size=pool_size, max_overflow=0, connect_args=connect_args,
                                      hide_parameters=True)

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
            statement = "BEGIN" if readonly else "BEGIN IMMEDIATE"
            try:
                driver.execute(statement)
            except sqlite3.OperationalError as exc:
                # "database is locked" past busy_timeout: as SQLAlchemy's own, which the API
                # answers 503 (send again) and the workers retry, not a 500 and a crash.
                raise sa.exc.OperationalError(statement, None, exc) from exc

        return engine

    async def run(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(conn, *args, **kwargs)`` in one transaction off the trio thread.

        Commits if `fn` returns, rolls back if it raises (the exception propagates). Once
        committed, wakes whom `fn` asked for with `wake_after_commit`.
        """

        return await self._in_thread(False, False, fn, *args, **kwargs)

    async def read(self, fn: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Like `run`, for a unit of work that only reads (SQLite then takes no write lock)."""
        return await self._in_thread(True, False, fn, *args, **kwargs)

    async def probe(self, fn: Callable[[Connection], T]) -> T:
        """A read its caller may stop waiting for (a readiness check under a deadline): on
        cancellation the thread is left to finish on its own. Any other call waits for its
        thread, which a database that stopped answering holds until its timeouts end it."""
        return await self._in_thread(True, True, fn)

    async def _in_thread(
        self, readonly: bool, abandon: bool, fn: Callable[Concatenate[Connection, P], T], *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        def unit_of_work() -> tuple[T, Wake]:
            with self.engine.connect() as conn:
                conn = conn.execution_options(docex_readonly=readonly)
                conn.info.pop(_WAKE_KEY, None)
                try:
                    with conn.begin():
                        result = fn(conn, *args, **kwargs)
                finally:
                    wake: Wake = conn.info.pop(_WAKE_KEY, Wake.NONE)
                return result, wake  # reached only once committed

        result, wake = await trio.to_thread.run_sync(unit_of_work, limiter=self.limiter, abandon_on_cancel=abandon)
        # Back on the trio thread: a Wakeup (a trio.Event) is not thread-safe.
        if Wake.WORKERS in wake:
            self.jobs_due.set()
        if Wake.DISPATCHER in wake:
            self.deliveries_due.set()
        if Wake.JOB_ENDED in wake:
            self.jobs_ended.set()
        return result

    def dispose(self) -> None:
        self.engine.dispose()
