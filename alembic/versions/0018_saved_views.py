"""saved views: filters over a project's runs, each with a board of its own

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "saved_views",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("project_id", sa.Integer(),
                  sa.ForeignKey("projects.id", ondelete="CASCADE"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("owner_id", sa.Integer(),
                  sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("shared", sa.Boolean(), nullable=False),
        sa.Column("preset", sa.String(16), nullable=True),
        sa.Column("filter", sa.JSON(), nullable=False),
        sa.Column("compare_id", sa.Integer(),
                  sa.ForeignKey("compare_boards.id", ondelete="CASCADE"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("project_id", "name"),
        sa.UniqueConstraint("compare_id"),
        sqlite_autoincrement=True,
    )  # fmt: skip
    op.create_index("ix_saved_views_project_id", "saved_views", ["project_id"])
    op.create_index("ix_saved_views_owner_id", "saved_views", ["owner_id"])


def downgrade() -> None:
    op.drop_table("saved_views")
