"""A new, empty PostgreSQL database for one test or benchmark run, dropped afterwards.

The server is the one TBHUB_TEST_POSTGRES_URL names (a database there, and a role that may
create and drop databases); the test suite and the benchmarks in bench/ both use it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text

ADMIN_URL = os.environ.get(
    "TBHUB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


@contextmanager
def postgres_database(template: str | None = None, prefix: str = "tbhub_test_") -> Iterator[str]:
    """The URL of a new database `<prefix><12 hex digits>` on that server, empty or a copy
    of the database `template`; dropped afterwards, with any connections still open to it."""
    name = f"{prefix}{uuid.uuid4().hex[:12]}"
    copy_of = f' TEMPLATE "{template}"' if template else ""
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"{copy_of}'))
    try:
        yield ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
