"""Where the jobs keep things, and the lock that keeps two of them from overlapping."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from tbhub.core.errors import JobBusy
from tbhub.core.leader_lock import job_lock_held
from tbhub.core.locks import LockHeld, hold_lock
from tbhub.core.settings import Settings
from tbhub.storage.paths import beside_projects

TRASH_DIR_NAME = ".tbhub-trash"  # not a project slug, so no project can ever be called that


def trash_root(settings: Settings) -> Path:
    """The trash, checked to be outside every project directory (boards must not show it)."""
    configured = settings.trash_root or settings.storage / TRASH_DIR_NAME
    root = beside_projects(settings.storage, configured, "TBHUB_TRASH_ROOT", "trashed runs")
    root.mkdir(parents=True, exist_ok=True)
    return root


def archive_root(settings: Settings) -> Path:
    root = (settings.archive_root or settings.data_dir / "archive").expanduser().absolute()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextmanager
def job_lock(settings: Settings, name: str) -> Iterator[None]:
    """One `name` job (retention, backup) at a time, across processes: per database on
    PostgreSQL (every replica and admin command, on any host), per data dir on SQLite."""
    if make_url(settings.db_url).get_backend_name() == "postgresql":
        with job_lock_held(settings.db_url, name) as holder:
            if holder is not None:
                raise JobBusy(
                    f"another {name} job is running on this database ({holder}); wait for it "
                    "to finish and try again"
                )
            yield
        return
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        handle = hold_lock(settings.data_dir / f"{name}.lock")
    except LockHeld as held:
        raise JobBusy(
            f"another {name} job (pid {held.holder}) is running on {settings.data_dir}; "
            "wait for it to finish and try again"
        ) from None
    with handle:
        try:
            yield
        finally:
            handle.truncate(0)
