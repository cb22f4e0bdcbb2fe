"""server-side sessions; ids that credentials carry are never reused

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

Each sign-in gets a row in `user_sessions` (signing out deletes it). On SQLite the tables
whose ids a cookie, token, pass or cache carries are rebuilt with AUTOINCREMENT, so a deleted
row's id is never handed to the next row (PostgreSQL's sequences never go back). Session
cookies made before this revision carry no session id and are refused: everyone signs in
once more.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

NEVER_REUSED = ("users", "projects", "share_links", "api_tokens", "compare_boards")


def upgrade() -> None:
    op.create_table(
        "user_sessions",
        sa.Column("id_hash", sa.String(length=64), primary_key=True),
        sa.Column(
            "user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_user_sessions_user_id", "user_sessions", ["user_id"])
    op.create_index("ix_user_sessions_expires_at", "user_sessions", ["expires_at"])
    if op.get_bind().dialect.name != "sqlite":
        return
    # A rebuild copies every row with its id; AUTOINCREMENT then starts above the highest.
    # alembic/env.py turns foreign keys off for the rebuild (dropping the old table would
    # otherwise cascade into its children) and checks them afterwards.
    for table in NEVER_REUSED:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass


def downgrade() -> None:
    op.drop_index("ix_user_sessions_expires_at", table_name="user_sessions")
    op.drop_index("ix_user_sessions_user_id", table_name="user_sessions")
    op.drop_table("user_sessions")
