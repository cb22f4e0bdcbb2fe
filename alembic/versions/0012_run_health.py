"""run health: incidents the monitor raises and the per-project rules of its detectors

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("detector", sa.String(length=16), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=True),
        sa.Column("tag_regex", sa.String(length=255), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("window", sa.Integer(), nullable=True),
        sa.Column("histograms", sa.Boolean(), nullable=True),
        sa.Column("updated_by", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("project_id", "detector"),
    )
    op.create_table(
        "incidents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("run_path", sa.String(length=1024), nullable=False),
        sa.Column("tag", sa.String(length=255), nullable=True),
        sa.Column("detector", sa.String(length=16), nullable=False),
        sa.Column("severity", sa.String(length=8), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=True),
        sa.Column("last_step", sa.BigInteger(), nullable=True),
        sa.Column("wall_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("value_text", sa.String(length=32), nullable=True),
        sa.Column("message", sa.String(length=1024), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(["project_id"], ["projects.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,  # an incident's id is in URLs: never handed out twice
    )
    op.create_index("ix_incidents_project", "incidents", ["project_id", "id"])
    op.create_index("ix_incidents_run", "incidents", ["run_id", "detector", "tag"])
    op.create_index("ix_incidents_open", "incidents", ["resolved_at", "project_id"])


def downgrade() -> None:
    op.drop_index("ix_incidents_open", table_name="incidents")
    op.drop_index("ix_incidents_run", table_name="incidents")
    op.drop_index("ix_incidents_project", table_name="incidents")
    op.drop_table("incidents")
    op.drop_table("alert_rules")
