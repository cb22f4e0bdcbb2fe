"""api tokens and the run registry

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("hint", sa.String(length=16), nullable=False),
        sa.Column(
            "scope",
            sa.Enum("read", "write", name="tokenscope", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_api_tokens_user_id"), ["user_id"], unique=False)

    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("group_name", sa.String(length=255), nullable=True),
        sa.Column(
            "status",
            sa.Enum(
                "running",
                "finished",
                "failed",
                "killed",
                "discovered",
                name="runstatus",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column(
            "source",
            sa.Enum("api", "discovered", name="runsource", native_enum=False, length=16),
            nullable=False,
        ),
        sa.Column(
            "retention_state",
            sa.Enum(
                "present",
                "trashed",
                "archived",
                "purged",
                name="retentionstate",
                native_enum=False,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("trash_entry_id", sa.Integer(), nullable=True),
        sa.Column("hparams", sa.JSON(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("git_commit", sa.String(length=64), nullable=True),
        sa.Column("git_branch", sa.String(length=255), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=True),
        sa.Column("dataset_version", sa.String(length=255), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("notes", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("first_write", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_write", sa.DateTime(timezone=True), nullable=True),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "path"),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index("ix_runs_project_created", ["project_id", "created_at"], unique=False)

    op.create_table(
        "api_token_projects",
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["token_id"], ["api_tokens.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token_id", "project_id"),
    )
    with op.batch_alter_table("api_token_projects", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_api_token_projects_project_id"), ["project_id"], unique=False
        )

    op.create_table(
        "run_tags",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("tag", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "tag"),
    )
    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_tags_tag"), ["tag"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("run_tags", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_tags_tag"))

    op.drop_table("run_tags")
    with op.batch_alter_table("api_token_projects", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_token_projects_project_id"))

    op.drop_table("api_token_projects")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index("ix_runs_project_created")

    op.drop_table("runs")
    with op.batch_alter_table("api_tokens", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_user_id"))

    op.drop_table("api_tokens")
