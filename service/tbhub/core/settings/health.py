"""The run-health settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class HealthSettings(BaseModel):
    """Run health: the monitor on the leader that reads the runs' event files as they grow
    and raises incidents (health/monitor.py). What it detects is set per project (alert
    rules); these bound what it costs."""

    health_monitor: bool = Field(
        default=True,
        description="Watch active runs' event files for NaN, divergence, grad-norm "
        "explosions, stalls and crashes (on the leader). Needs the storage watcher "
        "(`watch_mode` not `off`) to hear of new data.",
    )
    health_interval: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="Longest wait in seconds between two monitor passes; a change the "
        "watcher reports starts one sooner. Stalls and crashes are checked each pass.",
    )
    health_pass_bytes: int = Field(
        default=64 << 20,
        ge=1 << 16,
        le=1 << 34,
        description="Bytes of event files one monitor pass reads at most; a run behind by "
        "more catches up over the next passes.",
    )
    health_max_runs: int = Field(
        default=2048,
        ge=1,
        le=1_000_000,
        description="Runs whose reading position, recent values and sparkline the leader keeps "
        "in memory (up to a few hundred KiB each); a run dropped beyond this is read again "
        "from the start when it changes. Raise it above the number of runs written at once.",
    )
