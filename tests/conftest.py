"""Shared fixtures: a fresh database on SQLite and on PostgreSQL, settings, an app client."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.serve.app import build_context, create_app
from tests.support.scratch_database import postgres_database

# Which databases the suite runs on (comma-separated); both unless told otherwise.
DATABASES = os.environ.get("TBHUB_TEST_DATABASES", "sqlite,postgresql").split(",")
TEST_SECRET = "test-secret-" + "x" * 40

# The order in which `--dist loadfile` hands files to the workers: the files that run for
# minutes in one test first (collected last, one of them alone kept a worker busy for
# minutes after the others had finished), then the rest by their number of tests, largest
# first, as xdist's own reordering would (turned off here so that this order holds).
LONG_FIRST = ("tests/e2e/test_soak_smoke.py",)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    files: dict[str, int] = {}
    for item in items:
        name = item.nodeid.split("::", 1)[0]
        files[name] = files.get(name, 0) + 1

    def order(item: pytest.Item) -> tuple[bool, int]:
        name = item.nodeid.split("::", 1)[0]
        return (not name.startswith(LONG_FIRST), -files[name])

    items.sort(key=order)  # stable: a file's tests keep their order


@contextmanager
def empty_database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'tbhub.sqlite3'}"
        return
    with postgres_database() as url:
        yield url


class MigratedTemplates:
    """One database of each kind built by `alembic upgrade head` per test session, copied for
    each test that wants a migrated database: a copy costs a fraction of running every
    migration again (a PostgreSQL copy is `CREATE DATABASE ... TEMPLATE`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sqlite: Path | None = None
        self.postgres: str | None = None
        self._cleanup = contextlib.ExitStack()

    @contextmanager
    def copy(self, kind: str, tmp_path: Path) -> Iterator[str]:
        if kind == "sqlite":
            if self.sqlite is None:
                self.sqlite = self.root / "template.sqlite3"
                upgrade(f"sqlite:///{self.sqlite}")
            target = tmp_path / "tbhub.sqlite3"
            shutil.copyfile(self.sqlite, target)
            yield f"sqlite:///{target}"
            return
        if self.postgres is None:
            url = self._cleanup.enter_context(postgres_database())
            upgrade(url)
            self.postgres = url.rsplit("/", 1)[1]
        with postgres_database(template=self.postgres) as url:
            yield url

    def close(self) -> None:
        self._cleanup.close()


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    templates = MigratedTemplates(tmp_path_factory.mktemp("templates"))
    try:
        yield templates
    finally:
        templates.close()


@pytest.fixture(params=DATABASES)
def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_templates: MigratedTemplates
) -> Iterator[str]:
    """A database of each kind at the newest schema (`alembic upgrade head`), made for this
    test and dropped after it."""
    with migrated_templates.copy(request.param, tmp_path) as url:
        yield url


@pytest.fixture(params=DATABASES)
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind, without tables: for what must meet an unmigrated one."""
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


# pytest-xdist's workers (`make test` runs the suite on several) export COLUMNS and LINES for
# their own output; the commands the tests start must see the environment a script has.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)
