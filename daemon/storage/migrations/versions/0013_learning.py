"""Learning from corrections (issue #16): what a job keeps of its document for learning
(jobs.reading), the examples corrections teach and their issuers' fingerprint keys.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

from daemon.storage.tables import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("reading", sa.JSON(), nullable=True))
    op.create_table(
        "learned_examples",
        sa.Column("id", sa.String(26), nullable=False),
        sa.Column("user_id", sa.String(26), nullable=False),
        sa.Column("schema_id", sa.String(26), nullable=False),
        sa.Column("job_id", sa.String(26), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("keys", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name="fk_learned_examples_user_id_users",
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_learned_examples"),
    )
    op.create_index("ix_learned_examples_schema", "learned_examples", ["user_id", "schema_id", "id"])
    op.create_index("ix_learned_examples_job", "learned_examples", ["job_id"])
    op.create_table(
        "learned_keys",
        sa.Column("example_id", sa.String(26), nullable=False),
        sa.Column("user_id", sa.String(26), nullable=False),
        sa.Column("schema_id", sa.String(26), nullable=False),
        sa.Column("key", sa.String(40), nullable=False),
        sa.ForeignKeyConstraint(["example_id"], ["learned_examples.id"],
                                name="fk_learned_keys_example_id_learned_examples", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("example_id", "key", name="pk_learned_keys"),
    )
    op.create_index("ix_learned_keys_lookup", "learned_keys", ["user_id", "schema_id", "key"])


def downgrade() -> None:
    op.drop_table("learned_keys")
    op.drop_table("learned_examples")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("reading")
