"""Batch runs remember a cancel, and end CANCELLED only once none of their jobs runs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

from daemon.storage.tables import UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_runs") as batch:
        batch.add_column(sa.Column("cancel_requested_at", UTCDateTime(), nullable=True))
    # Runs cancelled before: their cancel was at their last update.
    op.execute("UPDATE job_runs SET cancel_requested_at = updated_at WHERE status = 'CANCELLED'")


def downgrade() -> None:
    with op.batch_alter_table("job_runs") as batch:
        batch.drop_column("cancel_requested_at")
