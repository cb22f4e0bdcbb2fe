"""Alembic environment: the URL comes from tbhub's settings via db.alembic_config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from tbhub.core.db import make_engine
from tbhub.core.leader_lock import LOCK_CLASS, MIGRATIONS
from tbhub.core.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(url=config.get_main_option("sqlalchemy.url"), target_metadata=target_metadata)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None
    engine = make_engine(url)
    with engine.connect() as connection:
        sqlite = connection.dialect.name == "sqlite"
        if sqlite:
            # Batch migrations rebuild a table (copy, drop, rename); with foreign keys on,
            # dropping a parent would cascade into its children. SQLite ignores this pragma
            # inside a transaction, so it is set before one begins; checked at the end.
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            if connection.dialect.name == "postgresql":
                # Replicas starting together upgrade one after the other; the second then
                # finds the schema current (held until this transaction ends).
                connection.execute(
                    text(f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {MIGRATIONS})")
                )
            context.run_migrations()
            if sqlite:
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise RuntimeError(f"the migration left broken foreign keys: {broken[:5]}")
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
