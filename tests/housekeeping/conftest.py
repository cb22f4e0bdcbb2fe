"""Fixtures for the retention and backup tests: real files, real databases, real rsync."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.settings import Settings
from tbhub.domain.projects import create_project

EVENTS = "events.out.tfevents.1700000000.host"
MakeRun = Callable[..., Path]


@pytest.fixture
def jobs_settings(settings: Settings) -> Settings:
    """Test settings with no retention limits and nothing counting as active."""
    settings.retention_active_minutes = 0
    settings.backup_retry_backoff = 0.05
    return settings


@pytest.fixture
def project(factory: sessionmaker[Session], jobs_settings: Settings) -> str:
    with transaction(factory) as session:
        create_project(
            session, name="vision", storage_root=jobs_settings.storage, owner=None, actor="test"
        )
    return "vision"


@pytest.fixture
def make_run(jobs_settings: Settings) -> MakeRun:
    """make_run('vision', 'g/run-1', age_days=3, size=100): a run with an event file and an
    extra file, both last written `age_days` ago."""

    def make(project: str, path: str, *, age_days: float = 0.0, size: int = 100) -> Path:
        run = jobs_settings.storage / project / path
        run.mkdir(parents=True, exist_ok=True)
        stamp = time.time() - age_days * 86400
        for name, data in ((EVENTS, os.urandom(size)), ("notes.txt", b"x" * 10)):
            (run / name).write_bytes(data)
            os.utime(run / name, (stamp, stamp))
        return run

    return make


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every regular file under `root` (symlinks not followed)."""
    result = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            result[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return result


@pytest.fixture
def cli_env(
    jobs_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Environment for running `tbhub` (in-process or as a child) on the test's settings."""
    env = {
        "TBHUB_DATA_DIR": str(jobs_settings.data_dir),
        "TBHUB_STORAGE_ROOT": str(jobs_settings.storage),
        "TBHUB_DATABASE_URL": jobs_settings.db_url,
        "TBHUB_CONFIG": str(tmp_path / "absent.toml"),
        "TBHUB_RETENTION_ACTIVE_MINUTES": "0",
        "TBHUB_BACKUP_RETRY_BACKOFF": "0.05",
    }
    if jobs_settings.backup_target:
        env["TBHUB_BACKUP_TARGET"] = jobs_settings.backup_target
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


def fill_storage(settings: Settings, *, runs: int = 5, files: int = 4, size: int = 20_000) -> None:
    """Random event data: `runs` runs of `files` files of `size` bytes in project vision."""
    for r in range(runs):
        run = settings.storage / "vision" / "g" / f"run-{r}"
        run.mkdir(parents=True, exist_ok=True)
        for f in range(files):
            (run / f"events.out.tfevents.{f}.host").write_bytes(os.urandom(size))


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs the test mounts itself (a disk that fills), unmounted afterwards even on
    failure."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                   check=True)  # fmt: skip
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)
