"""compare boards: boards over runs picked from several projects

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

OBSERVED = ("stopped", "starting", "ready", "stopping", "failed", "no_capacity")


def upgrade() -> None:
    op.create_table(
        "compare_boards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("slug", sa.String(length=16), nullable=False),
        sa.Column("owner_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        # The same board state columns as `boards` (models.BoardState).
        sa.Column(
            "desired_state",
            sa.Enum("running", "stopped", name="desiredstate", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("desired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_access_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "observed_state",
            sa.Enum(*OBSERVED, name="observedstate", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("observed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("upstream", sa.String(length=255), nullable=True),
        sa.Column("instance_id", sa.String(length=64), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status_note", sa.Text(), nullable=True),
        sa.Column("pss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("draining_instance_id", sa.String(length=64), nullable=True),
        sa.Column("draining_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("memory_backoffs", sa.Integer(), server_default="0", nullable=False),
        sa.Column("memory_retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("swapping", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("restart_requested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("restarts", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["owner_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("slug"),
    )
    with op.batch_alter_table("compare_boards") as batch:
        batch.create_index(batch.f("ix_compare_boards_owner_id"), ["owner_id"], unique=False)
    op.create_table(
        "compare_runs",
        sa.Column("compare_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["compare_id"], ["compare_boards.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("compare_id", "run_id"),
    )
    with op.batch_alter_table("compare_runs") as batch:
        batch.create_index(batch.f("ix_compare_runs_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_table("compare_runs")
    op.drop_table("compare_boards")
