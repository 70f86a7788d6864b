"""Webhook endpoints as a database at revision 0013 stored them, custom headers in plain
JSON: what migration 0014 seals (tests/integration/test_webhook_delivery.py and
tests/e2e/test_lifecycle.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlalchemy as sa

from daemon.clock import utcnow
from daemon.storage.tables import UTCDateTime

_USERS = sa.table("users", *(sa.column(c) for c in ("id", "email", "email_key", "name", "password_hash", "role")),
                  sa.column("created_at", UTCDateTime), sa.column("updated_at", UTCDateTime))
# webhook_endpoints as revision 0013 has it: the headers in plain JSON.
ENDPOINTS_0013 = sa.table(
    "webhook_endpoints",
    *(sa.column(c) for c in ("id", "user_id", "url", "delivery_mode", "body_format", "secret_sealed", "enabled",
                             "consecutive_dead_deliveries")),
    sa.column("events", sa.JSON), sa.column("custom_headers", sa.JSON),
    sa.column("created_at", UTCDateTime), sa.column("updated_at", UTCDateTime),
)


def insert_plain_endpoints(engine: sa.Engine, headers_by_id: dict[str, dict[str, str]]) -> None:
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(_USERS.insert().values(id="u1", email="u@example.com", email_key="u@example.com", name="U",
                                            password_hash="x", role="USER", created_at=now, updated_at=now))
        for endpoint_id, headers in headers_by_id.items():
            conn.execute(ENDPOINTS_0013.insert().values(
                id=endpoint_id, user_id="u1", url="https://example.com/h", delivery_mode="AUTOMATIC", events=["*"],
                body_format="JSON", custom_headers=headers, secret_sealed=b"sealed", enabled=True,
                consecutive_dead_deliveries=0, created_at=now, updated_at=now))


def sealed_headers(engine: sa.Engine) -> dict[str, bytes | None]:
    """Each endpoint's sealed custom headers, once migrated past 0014."""
    with engine.connect() as conn:
        return {row[0]: None if row[1] is None else bytes(row[1]) for row in conn.execute(
            sa.text("SELECT id, custom_headers_sealed FROM webhook_endpoints"))}


def on_disk(engine: sa.Engine, needle: bytes) -> bool:
    """Whether the bytes of `needle` are anywhere in the webhook_endpoints table's storage:
    PostgreSQL's heap pages, dead row versions and dropped columns included (pageinspect);
    SQLite's whole file, free pages included, once the WAL is checkpointed into it."""
    if engine.dialect.name == "sqlite":
        path = engine.url.database or ""
        checkpoint = sqlite3.connect(path, isolation_level=None)
        try:
            checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            checkpoint.close()
        return needle in Path(path).read_bytes()
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pageinspect SCHEMA public")
        conn.commit()
        found = conn.execute(sa.text(
            "SELECT count(*) FROM generate_series(0, pg_relation_size('webhook_endpoints') / 8192 - 1) AS page, "
            "public.heap_page_items(public.get_raw_page('webhook_endpoints', page::int)) AS item "
            "WHERE position(:needle IN item.t_data) > 0"), {"needle": needle}).scalar_one()
        return bool(found)
