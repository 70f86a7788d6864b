"""Watched inboxes (issue #17): folders whose new files become jobs, and what each took.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

from daemon.storage.tables import UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "inboxes",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("user_id", sa.String(length=26), nullable=False),
        sa.Column("schema_id", sa.String(length=26), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("integration_id", sa.String(length=26), nullable=True),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("after", sa.String(length=10), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("last_swept_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_inboxes_user_id_users"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["integration_id"], ["integrations.id"],
                                name=op.f("fk_inboxes_integration_id_integrations"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_inboxes")),
    )
    op.create_index("ix_inboxes_user", "inboxes", ["user_id", "id"])
    op.create_table(
        "inbox_items",
        sa.Column("inbox_id", sa.String(length=26), nullable=False),
        sa.Column("identity", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=1024), nullable=False),
        sa.Column("job_id", sa.String(length=26), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("taken_at", UTCDateTime(), nullable=False),
        sa.Column("settled_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["inbox_id"], ["inboxes.id"], name=op.f("fk_inbox_items_inbox_id_inboxes"),
                                ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_inbox_items_job_id_jobs"),
                                ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("inbox_id", "identity", name=op.f("pk_inbox_items")),
    )
    op.create_index("ix_inbox_items_job_id", "inbox_items", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_inbox_items_job_id", "inbox_items")
    op.drop_table("inbox_items")
    op.drop_index("ix_inboxes_user", "inboxes")
    op.drop_table("inboxes")
