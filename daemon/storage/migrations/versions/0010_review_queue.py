"""The review queue (GET /api/jobs?review=pending, issue #15): each job's lowest value
confidence in a column, and an index that walks a user's unapproved COMPLETED jobs in
order. Jobs completed before get theirs from their resultMeta.fields.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_BATCH = 1000


def _least_confidence(fields: Any) -> float:
    # As daemon.jobs.models.least_confidence for an extracted result (a migration keeps
    # its own copy: the function may change, what this revision wrote may not).
    if not isinstance(fields, dict) or not fields:
        return 0.0
    return min(float(e.get("confidence", 0.0)) if isinstance(e, dict) else 0.0 for e in fields.values())


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("min_confidence", sa.Float(), nullable=True))
    op.create_index("ix_jobs_review", "jobs", ["user_id", "status", "reviewed_at", "id"])
    conn = op.get_bind()
    jobs = sa.table("jobs", sa.column("id", sa.String), sa.column("status", sa.String),
                    sa.column("result_meta", sa.JSON), sa.column("min_confidence", sa.Float))
    last = ""
    while True:
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.result_meta)
                            .where(jobs.c.status == "COMPLETED", jobs.c.id > last)
                            .order_by(jobs.c.id).limit(_BATCH)).all()
        if not rows:
            break
        for row in rows:
            meta = row.result_meta if isinstance(row.result_meta, dict) else {}
            conn.execute(jobs.update().where(jobs.c.id == row.id)
                         .values(min_confidence=_least_confidence(meta.get("fields"))))
        last = rows[-1].id


def downgrade() -> None:
    op.drop_index("ix_jobs_review", "jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("min_confidence")
