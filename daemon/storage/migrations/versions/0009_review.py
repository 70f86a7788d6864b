"""A person's approval of a job's result (the console, issue #15): who checked it and when.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

from daemon.storage.tables import UTCDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("reviewed_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("reviewed_by", sa.String(26), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("reviewed_by")
        batch.drop_column("reviewed_at")
