"""The starting point: an empty, versioned database.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
