"""run_params: each run's hyperparameters and summary metrics, one indexed row per key, for
searching and sorting runs by them; runs.hparams_file_error

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BATCH = 1000


def upgrade() -> None:
    op.add_column("runs", sa.Column("hparams_file_error", sa.String(length=255), nullable=True))
    op.create_table(
        "run_params",
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("kind", sa.String(length=1), primary_key=True),
        sa.Column("key", sa.String(length=128), primary_key=True),
        sa.Column("num", sa.Float(), nullable=True),
        sa.Column("text", sa.String(length=255), nullable=True),
    )
    op.create_index("ix_run_params_num", "run_params", ["kind", "key", "num", "run_id"])
    op.create_index("ix_run_params_text", "run_params", ["kind", "key", "text", "run_id"])
    _backfill()


def _backfill() -> None:
    # Frozen copy of domain/run_params.param_values: a migration never imports the app.
    def cell(value: Any) -> tuple[float | None, str | None]:
        if isinstance(value, bool):
            return None, "true" if value else "false"
        if isinstance(value, int | float):
            return float(value), None
        if isinstance(value, str):
            return None, value[:255]
        return None, json.dumps(value, sort_keys=True)[:255]

    bind = op.get_bind()
    runs = sa.table("runs", sa.column("id"), sa.column("hparams"), sa.column("metrics"))
    params = sa.table("run_params", sa.column("run_id"), sa.column("kind"), sa.column("key"),
                      sa.column("num"), sa.column("text"))  # fmt: skip
    rows: list[dict[str, Any]] = []
    for run_id, hparams, metrics in bind.execute(
        sa.select(runs.c.id, runs.c.hparams, runs.c.metrics)
    ):
        for kind, values in (("h", hparams), ("m", metrics)):
            if isinstance(values, str):
                values = json.loads(values)
            for key, value in (values or {}).items():
                num, text = cell(value)
                rows.append({"run_id": run_id, "kind": kind, "key": key[:128], "num": num,
                             "text": text})  # fmt: skip
        if len(rows) >= BATCH:
            bind.execute(params.insert(), rows)
            rows = []
    if rows:
        bind.execute(params.insert(), rows)


def downgrade() -> None:
    op.drop_index("ix_run_params_text", table_name="run_params")
    op.drop_index("ix_run_params_num", table_name="run_params")
    op.drop_table("run_params")
    op.drop_column("runs", "hparams_file_error")
