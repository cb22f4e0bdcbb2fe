"""audit targets hold "<project>/<run path>" whole (63 + 1 + 1024 characters)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column(
            "target",
            type_=sa.String(length=1088),
            existing_type=sa.String(length=255),
            existing_nullable=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("audit_events") as batch:
        batch.alter_column(
            "target",
            type_=sa.String(length=255),
            existing_type=sa.String(length=1088),
            existing_nullable=False,
        )
