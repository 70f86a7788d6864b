"""Incomplete results (SPEC §7): a COMPLETED job's result may lack required values.

`jobs.result_complete` says whether it does (NULL until the job completes), so that
`GET /api/jobs?complete=false` finds the jobs waiting for a person. Jobs completed
before were complete (a missing value failed them): their column is true and their
resultMeta gains ``"complete": true, "missing": []``.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_COMPLETE_META = {
    "postgresql": "UPDATE jobs SET result_meta = (result_meta::jsonb || '{\"complete\": true, \"missing\": []}')::json"
                  " WHERE status = 'COMPLETED' AND json_typeof(result_meta) = 'object'",
    "sqlite": "UPDATE jobs SET result_meta = json_set(result_meta, '$.complete', json('true'), '$.missing', json('[]'))"
              " WHERE status = 'COMPLETED' AND json_type(result_meta) = 'object'",
}


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("result_complete", sa.Boolean(), nullable=True))
    op.execute("UPDATE jobs SET result_complete = true WHERE status = 'COMPLETED'")
    op.execute(_COMPLETE_META[op.get_bind().dialect.name])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("result_complete")
