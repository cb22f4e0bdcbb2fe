"""runs.logged_hparams / logged_metrics: what the training code wrote (add_hparams, the HF
Trainer, Lightning); run_params.source: 'r' registered with tbhub, 't' from the training code

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("logged_hparams", sa.JSON(), nullable=True))
    op.add_column("runs", sa.Column("logged_metrics", sa.JSON(), nullable=True))
    op.add_column(
        "run_params",
        sa.Column("source", sa.String(length=1), nullable=False, server_default="r"),
    )


def downgrade() -> None:
    with op.batch_alter_table("run_params") as batch:
        batch.drop_column("source")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("logged_metrics")
        batch.drop_column("logged_hparams")
