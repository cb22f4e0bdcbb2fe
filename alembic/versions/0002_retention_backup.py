"""retention policies, pinned runs, the trash journal and backup runs

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "retention_overrides",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("max_age_days", sa.Float(), nullable=True),
        sa.Column("keep_last", sa.Integer(), nullable=True),
        sa.Column("max_project_bytes", sa.BigInteger(), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=True),
        sa.Column("active_minutes", sa.Float(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("project_id"),
    )
    op.create_table(
        "pinned_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("run_path", sa.String(length=1024), nullable=False),
        sa.Column("pinned_by", sa.String(length=64), nullable=False),
        sa.Column("pinned_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "run_path"),
    )
    op.create_table(
        "trash_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project", sa.String(length=63), nullable=False),
        sa.Column("run_path", sa.String(length=1024), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("last_write", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("archive_path", sa.String(length=1024), nullable=True),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("trashed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("trash_entries", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trash_entries_state"), ["state"], unique=False)
    op.create_table(
        "backup_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=False),
        sa.Column("snapshot", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("transferred_bytes", sa.BigInteger(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("actor", sa.String(length=64), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("backup_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_backup_runs_state"), ["state"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("backup_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_backup_runs_state"))
    op.drop_table("backup_runs")
    with op.batch_alter_table("trash_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trash_entries_state"))
    op.drop_table("trash_entries")
    op.drop_table("pinned_runs")
    op.drop_table("retention_overrides")
