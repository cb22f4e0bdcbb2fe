"""The storage settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class StorageSettings(BaseModel):
    """Storage: the data directory, the database, the log storage, its watcher and uploads."""

    data_dir: Path = Field(
        default=Path("tbhub-data"),
        description="Where tbhub keeps its database (SQLite), secret key, nginx config and "
        "board state. Must be a local disk.",
    )
    storage_root: Path | None = Field(
        default=None,
        description="Root of the log tree: <storage_root>/<project>/<run>/. "
        "Defaults to <data_dir>/storage.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL. Defaults to SQLite at <data_dir>/tbhub.sqlite3; "
        "use postgresql+psycopg://... for several replicas.",
    )
    compare_root: Path | None = Field(
        default=None,
        description="Where compare boards' logdirs live: views of hard links to the event "
        "files of the runs compared. Defaults to <storage_root>/.tbhub-compare: outside every "
        "project and on the storage filesystem, as hard links must be.",
    )
    # Storage watcher and uploads (issue 8).
    watch_mode: Literal["auto", "inotify", "polling", "off"] = Field(
        default="auto",
        description="How `tbhub serve` watches the storage for runs: `auto` polls on "
        "NFS/CIFS/FUSE (where inotify misses other clients' writes) and uses inotify "
        "elsewhere; `off` disables discovery and change-triggered backups.",
    )
    watch_poll_interval: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds between two walks of the storage tree in polling mode.",
    )
    upload_max_chunk_bytes: int = Field(
        default=16 << 20,
        ge=1 << 16,
        le=1 << 30,
        description="Largest upload request body (one chunk) the server and nginx accept; "
        "bigger bodies get 413.",
    )
    upload_min_free_bytes: int = Field(
        default=1 << 30,
        ge=0,
        description="Uploads are refused (507) when they would leave less than this many "
        "bytes free on the storage filesystem.",
    )
