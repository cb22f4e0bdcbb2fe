"""board healing: memory, drain and restart columns on boards; per-project board settings

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("boards") as batch:
        batch.add_column(sa.Column("status_note", sa.Text(), nullable=True))
        batch.add_column(sa.Column("pss_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("draining_instance_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("draining_since", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("memory_backoffs", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("memory_retry_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("restart_requested_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch.add_column(
            sa.Column("swapping", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("restarts", sa.JSON(), nullable=True))
    op.create_table(
        "board_settings",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("reload_interval", sa.Integer(), nullable=True),
        sa.Column("samples_per_plugin", sa.String(length=255), nullable=True),
        sa.Column("memory_limit", sa.BigInteger(), nullable=True),
        sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("plugins", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id"),
    )


DOWNGRADE_DROPS = (
    "restarts", "swapping", "restart_requested_at", "memory_retry_at", "memory_backoffs",
    "draining_since", "draining_instance_id", "pss_bytes", "status_note",
)  # fmt: skip


def downgrade() -> None:
    op.drop_table("board_settings")
    with op.batch_alter_table("boards") as batch:
        for column in DOWNGRADE_DROPS:
            batch.drop_column(column)
