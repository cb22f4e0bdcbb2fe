"""Shared fixtures: a fresh database on SQLite and on PostgreSQL, settings, an app client."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session, sessionmaker

from tbhub.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.main import build_context, create_app
from tbhub.settings import Settings, prepare_runtime

# Which databases the suite runs on (comma-separated); both unless told otherwise.
DATABASES = os.environ.get("TBHUB_TEST_DATABASES", "sqlite,postgresql").split(",")
# A PostgreSQL server where the tests may create and drop databases.
POSTGRES_ADMIN_URL = os.environ.get(
    "TBHUB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
TEST_SECRET = "test-secret-" + "x" * 40


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new, empty PostgreSQL database, dropped afterwards."""
    name = f"tbhub_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield POSTGRES_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def empty_database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'tbhub.sqlite3'}"
        return
    with postgres_database() as url:
        yield url


@pytest.fixture(params=DATABASES)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind, created for this test and dropped after it."""
    with empty_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    return prepare_runtime(
        Settings(
            data_dir=tmp_path / "data",
            storage_root=tmp_path / "storage",
            database_url=database_url,
            secret_key=TEST_SECRET,
        )
    )


@pytest.fixture
def factory(settings: Settings) -> Iterator[sessionmaker[Session]]:
    """Sessions on a database built by `alembic upgrade head`, as production builds it."""
    upgrade(settings.db_url)
    engine = make_engine(settings.db_url)
    yield make_session_factory(engine)
    engine.dispose()


@pytest.fixture
def db(factory: sessionmaker[Session]) -> Iterator[Session]:
    with transaction(factory) as session:
        yield session


@pytest.fixture
def client(settings: Settings, factory: sessionmaker[Session]) -> Iterator[TestClient]:
    app = create_app(build_context(settings))
    with TestClient(app, base_url="http://testserver") as test_client:
        yield test_client
