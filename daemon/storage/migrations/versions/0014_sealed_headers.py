"""Webhook custom headers sealed at rest: they commonly carry the receiver's credentials
(`Authorization: Bearer ...`), and were stored as plain JSON.

The headers already stored are sealed with WEBHOOK_ENCRYPTION_KEY, which `docex migrate`
and `docex serve` hand to the migration (`migrate.upgrade`); without a key, a database
that has some cannot be migrated, and says so.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import context, op

from daemon.errors import StartupError
from daemon.webhooks.keys import open_headers_with, seal_headers_with

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_endpoints = sa.table(
    "webhook_endpoints",
    sa.column("id", sa.String),
    sa.column("custom_headers", sa.JSON),
    sa.column("custom_headers_sealed", sa.LargeBinary),
)


def _key(needed: bool) -> bytes:
    key: bytes | None = context.config.attributes.get("encryption_key")
    if needed and key is None:
        raise StartupError("webhook endpoints store custom headers, and sealing them needs WEBHOOK_ENCRYPTION_KEY: "
                           "set it (the key the endpoints' secrets were sealed with) and migrate again")
    return key or b""


def upgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "sqlite":
        # Pages and cells the plaintext leaves are zeroed, not just marked free (most
        # builds do so already; this connection does whatever the build).
        op.execute("PRAGMA secure_delete = ON")
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(sa.Column("custom_headers_sealed", sa.LargeBinary(), nullable=True))
    rows = [row for row in conn.execute(sa.select(_endpoints.c.id, _endpoints.c.custom_headers)) if row[1]]
    key = _key(needed=bool(rows))
    for endpoint_id, headers in rows:
        conn.execute(_endpoints.update().where(_endpoints.c.id == endpoint_id)
                     .values(custom_headers_sealed=seal_headers_with(key, endpoint_id, dict(headers))))
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.drop_column("custom_headers")
    if conn.dialect.name == "postgresql":
        # PostgreSQL drops a column from its catalogue only: every row, and each older
        # version of it, keeps the plaintext in the table's file. A rewrite writes the live
        # rows, the dropped column as NULL, to a new file; the old one goes at commit.
        op.execute("CLUSTER webhook_endpoints USING pk_webhook_endpoints")
        op.execute("ALTER TABLE webhook_endpoints SET WITHOUT CLUSTER")  # a one-off, not an ordering to keep


def downgrade() -> None:
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.add_column(sa.Column("custom_headers", sa.JSON(), nullable=True))
    conn = op.get_bind()
    rows = conn.execute(sa.select(_endpoints.c.id, _endpoints.c.custom_headers_sealed)).all()
    key = _key(needed=any(sealed is not None for _, sealed in rows))
    for endpoint_id, sealed in rows:
        conn.execute(_endpoints.update().where(_endpoints.c.id == endpoint_id)
                     .values(custom_headers=open_headers_with(key, endpoint_id, sealed)))
    with op.batch_alter_table("webhook_endpoints") as batch:
        batch.alter_column("custom_headers", existing_type=sa.JSON(), nullable=False)
        batch.drop_column("custom_headers_sealed")
