"""Alembic, driven from code: no alembic.ini to ship or to find at run time.

Alembic is imported only when there is something to migrate: importing it and
its scripts is ~0.16 s of CPU, an eighth of `docex serve`'s start, spent on
every start to learn that the database is up to date.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DatabaseError, OperationalError

from daemon.errors import StartupError

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS = Path(__file__).parent / "migrations"
# The newest revision in migrations/versions/: start-up and /api/ready compare the database
# with it. tests/integration/test_storage.py fails if a new migration does not move it.
HEAD = "0015"
# Several processes may start at once over one PostgreSQL database: one migrates, the rest wait.
_PG_MIGRATION_LOCK = 0x646F636578  # "docex"


def alembic_config(connection: Connection | None = None, encryption_key: bytes | None = None) -> AlembicConfig:
    """`encryption_key`: WEBHOOK_ENCRYPTION_KEY, for migrations that seal what was stored
    in plain text (0014) or open it again on the way down."""
    from alembic.config import Config as AlembicConfig

    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    cfg.attributes["encryption_key"] = encryption_key
    return cfg


def head_revision() -> str | None:
    """The head of Alembic's script directory (what `HEAD` must name)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    revision: str | None = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return revision


def schema_state(conn: Connection) -> str:
    """What /api/ready says of the database's schema: "ok", or what to do."""
    revision = current_revision(conn)
    if revision == HEAD:
        return "ok"
    if _newer(revision):
        return f"at revision {revision}, newer than this docex ({HEAD}): run the docex that migrated it"
    return "pending: run `docex migrate`"


def _newer(revision: str | None) -> bool:
    """A revision this docex does not have and cannot have come before its own (a rollback
    of docex after an upgrade): not for `docex migrate` to fix."""
    return revision is not None and not (revision.isdigit() and int(revision) <= int(HEAD))


def upgrade(engine: Engine, revision: str = "head", *, encryption_key: bytes | None = None) -> None:
    """Apply pending migrations (blocking; run it off the trio thread). `encryption_key`:
    see `alembic_config`.

    Raises:
        StartupError: the database cannot be reached (the first thing `docex serve`,
            `docex migrate` and `docex users create` do with it: one line, not a traceback).
    """
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        # The driver's own words ("connection refused", "password authentication failed for
        # user ...", "unable to open database file") on one line: never the URL, which may hold
        # a password.
        raise StartupError(f"cannot reach the database: {' '.join(str(exc.orig).split())}") from exc
    except DatabaseError as exc:  # SQLite: "file is not a database", "database disk image is malformed"
        raise StartupError(f"cannot read the database: {' '.join(str(exc.orig).split())} (a damaged or "
                           "foreign file: restore a backup)") from exc
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        before = current_revision(conn)
        if revision == "head" and before == HEAD:
            return
        if _newer(before):
            raise StartupError(f"the database is at revision {before}, newer than this docex ({HEAD}): run the "
                               "docex that migrated it, or restore a backup made before")
        from alembic import command

        command.upgrade(alembic_config(conn, encryption_key), revision)
        logging.getLogger(__name__).info("database migrated from %s to %s", before or "empty",
                                         HEAD if revision == "head" else revision,
                                         extra={"action": "db.migrated"})


def downgrade(engine: Engine, revision: str, *, encryption_key: bytes | None = None) -> None:
    from alembic import command

    with engine.begin() as conn:
        command.downgrade(alembic_config(conn, encryption_key), revision)
