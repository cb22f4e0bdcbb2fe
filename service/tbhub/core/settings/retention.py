"""The retention settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class RetentionSettings(BaseModel):
    """Retention: which runs go, when, and where they wait (trash, archive)."""

    # Retention (DESIGN.md decision 10): global defaults, overridable per project.
    retention_max_age_days: float | None = Field(
        default=None,
        ge=0,
        description="Runs whose last write is older than this many days are removed by "
        "retention. Unset or 0: no age limit.",
    )
    retention_keep_last: int | None = Field(
        default=None,
        ge=0,
        description="Keep only the newest N runs of a project (by last write); older ones are "
        "removed. Unset or 0: no limit.",
    )
    retention_max_project_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Quota: remove a project's oldest runs until its runs total at most this "
        "many bytes. Unset or 0: no quota.",
    )
    retention_action: Literal["trash", "archive"] = Field(
        default="trash",
        description="What retention does with a run: move it to the trash, or write a verified "
        "tar.gz into the archive root and then delete it.",
    )
    retention_active_minutes: float = Field(
        default=60.0,
        ge=0,
        description="Runs written to in the last this many minutes count as active and are "
        "never removed.",
    )
    retention_interval_hours: float | None = Field(
        default=None,
        gt=0,
        description="When set, `tbhub serve` applies retention every this many hours. "
        "Unset: only `tbhub admin retention apply` does.",
    )
    trash_root: Path | None = Field(
        default=None,
        description="Where retention moves runs. Defaults to <storage_root>/.tbhub-trash: "
        "outside every project and on the same filesystem, so a move is one rename.",
    )
    trash_grace_days: float = Field(
        default=7.0,
        ge=0,
        description="Days a run stays in the trash before it is purged for good.",
    )
    archive_root: Path | None = Field(
        default=None,
        description="Where the archive action writes <project>/<id>-<run>.tar.gz and its "
        "manifest. Defaults to <data_dir>/archive.",
    )
