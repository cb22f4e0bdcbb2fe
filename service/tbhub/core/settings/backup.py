"""The backup settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BackupSettings(BaseModel):
    """Backup: the rsync target, its schedule, retries and snapshots kept."""

    backup_target: str | None = Field(
        default=None,
        description="Where rsync snapshots go: a local path or user@host:path (over ssh). "
        "Unset: no backups. A relative path is taken from the directory tbhub starts in.",
    )
    backup_interval_hours: float | None = Field(
        default=24.0,
        gt=0,
        description="`tbhub serve` takes a snapshot every this many hours when a backup "
        "target is set. Unset: no scheduled backups.",
    )
    backup_after_change_seconds: float | None = Field(
        default=None,
        gt=0,
        description="When set, `tbhub serve` takes a snapshot this many seconds after the "
        "storage last changed (at most one per interval of this length).",
    )
    backup_rpo_hours: float = Field(
        default=26.0,
        gt=0,
        description="The recovery point objective: /metrics reports it as "
        "tbhub_backup_rpo_seconds, and the shipped alert rule fires when the newest "
        "complete snapshot is older (deploy/monitoring).",
    )
    backup_keep_daily: int = Field(
        default=7, ge=0, description="Complete snapshots kept: the newest of each of N days."
    )
    backup_keep_weekly: int = Field(
        default=4, ge=0, description="Complete snapshots kept: the newest of each of M weeks."
    )
    backup_retries: int = Field(
        default=3,
        ge=0,
        description="Retries when the backup target is unreachable (rsync/ssh exit codes "
        "5, 10, 12, 30, 35, 255), with exponential backoff.",
    )
    backup_retry_backoff: float = Field(
        default=10.0,
        ge=0,
        description="Seconds before the first retry; each further retry waits twice as long.",
    )
    backup_ssh_command: str = Field(
        default="ssh -o BatchMode=yes -o ConnectTimeout=10",
        description="The remote shell for user@host:path targets (rsync -e and remote commands).",
    )
    backup_rsync_args: list[str] = Field(
        default_factory=list,
        description='Extra rsync arguments for backups, as a JSON list (e.g. ["--bwlimit=50m"]).',
    )
