"""notifications: channels per project, per-user email preferences, and the delivery outbox

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def ref(name: str, table: str, **kwargs: bool) -> sa.Column[int]:
    """A column holding a row's id in `table`, deleted with that row."""
    return sa.Column(name, sa.Integer(), sa.ForeignKey(f"{table}.id", ondelete="CASCADE"), **kwargs)


def upgrade() -> None:
    op.create_table(
        "notification_channels",
        sa.Column("id", sa.Integer(), primary_key=True),
        ref("project_id", "projects", nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=True),
        sa.Column("secret", sa.String(length=255), nullable=True),
        sa.Column("recipients", sa.JSON(), nullable=False),
        sa.Column("detectors", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("created_by", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("project_id", "name"),
        sqlite_autoincrement=True,  # a channel's id is in URLs: never handed out twice
    )
    op.create_index("ix_notification_channels_project_id", "notification_channels", ["project_id"])
    op.create_table(
        "email_preferences",
        ref("user_id", "users", primary_key=True),
        ref("project_id", "projects", primary_key=True),
        sa.Column("address", sa.String(length=255), nullable=False),
        sa.Column("detectors", sa.JSON(), nullable=False),
        sa.Column("own_runs_only", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_email_preferences_project_id", "email_preferences", ["project_id"])
    op.create_table(
        "notification_deliveries",
        sa.Column("id", sa.Integer(), primary_key=True),
        ref("project_id", "projects", nullable=False),
        ref("channel_id", "notification_channels", nullable=True),
        ref("user_id", "users", nullable=True),
        sa.Column("incident_id", sa.Integer(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_deliveries_due", "notification_deliveries", ["state", "next_attempt_at"])
    op.create_index("ix_deliveries_channel", "notification_deliveries", ["channel_id", "id"])
    op.create_index("ix_notification_deliveries_user_id", "notification_deliveries", ["user_id"])


def downgrade() -> None:
    op.drop_table("notification_deliveries")
    op.drop_table("email_preferences")
    op.drop_table("notification_channels")
