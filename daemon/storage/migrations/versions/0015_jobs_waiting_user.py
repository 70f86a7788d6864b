"""Users take turns at the workers: an index to find a user with a waiting job in a range
of users with one seek (repos.jobs._next_user).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-30
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_waiting_user", "jobs", ["status", "user_id", "run_after"])


def downgrade() -> None:
    op.drop_index("ix_jobs_waiting_user", table_name="jobs")
