"""Indexes that keep a user's first page of jobs quick with many jobs (issue #15).

Every job list is keyset-paginated by id under a filter, so each filter gets an index
that ends in id: the database walks it in order and stops after a page, instead of
sorting every matching row. The single-column indexes on user_id, schema_id and
job_run_id are the prefixes of the new ones (foreign keys and deletes still use them).
The review queue's index holds only the COMPLETED jobs nobody approved (partial, on
both databases), so the queue walks those alone. bench/job_lists.py has the figures.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_UNREVIEWED = sa.text("status = 'COMPLETED' AND reviewed_at IS NULL")


def upgrade() -> None:
    op.drop_index("ix_jobs_review", "jobs")
    op.drop_index("ix_jobs_user_id", "jobs")
    op.drop_index("ix_jobs_schema_id", "jobs")
    op.drop_index("ix_jobs_job_run_id", "jobs")
    op.create_index("ix_jobs_user", "jobs", ["user_id", "id"])
    op.create_index("ix_jobs_user_status", "jobs", ["user_id", "status", "id"])
    op.create_index("ix_jobs_schema", "jobs", ["schema_id", "id"])
    op.create_index("ix_jobs_run", "jobs", ["job_run_id", "id"])
    op.create_index("ix_jobs_unreviewed", "jobs", ["user_id", "status", "id"], sqlite_where=_UNREVIEWED,
                    postgresql_where=_UNREVIEWED)


def downgrade() -> None:
    for name in ("ix_jobs_unreviewed", "ix_jobs_run", "ix_jobs_schema", "ix_jobs_user_status", "ix_jobs_user"):
        op.drop_index(name, "jobs")
    op.create_index("ix_jobs_job_run_id", "jobs", ["job_run_id"])
    op.create_index("ix_jobs_schema_id", "jobs", ["schema_id"])
    op.create_index("ix_jobs_user_id", "jobs", ["user_id"])
    op.create_index("ix_jobs_review", "jobs", ["user_id", "status", "reviewed_at", "id"])
