"""dashboard restrictions: per project, the dashboards viewers and/or share links may not see

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("board_settings") as batch:
        batch.add_column(
            sa.Column("restricted_dashboards", sa.JSON(), nullable=False, server_default="[]")
        )
        batch.add_column(sa.Column("restricted_audience", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("board_settings") as batch:
        batch.drop_column("restricted_audience")
        batch.drop_column("restricted_dashboards")
