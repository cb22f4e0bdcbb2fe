"""OIDC accounts: (issuer, subject) identity, synced email and display name

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

COLUMNS = ("oidc_issuer", "oidc_subject", "email", "display_name")


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.String(length=255), nullable=True))
        batch.create_unique_constraint("uq_users_oidc_identity", ["oidc_issuer", "oidc_subject"])


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_constraint("uq_users_oidc_identity", type_="unique")
        for name in reversed(COLUMNS):
            batch.drop_column(name)
