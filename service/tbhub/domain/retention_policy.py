"""Retention policy: the global default, per-project overrides, and the pure planning step.

`plan_project` is a pure function of (runs, policy, pinned, now), tested as a table. The
three limits combine: a run goes when it is older than the age limit, OR ranks past the
newest `keep_last`, OR is among the oldest runs that must go to bring the project under its
quota. Pinned and active runs never go, but they still count in the ranking and the quota:
they are there, and they take space.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from tbhub.core.bounds import DAYS_MAX, INT32_MAX, INT64_MAX, MINUTES_MAX
from tbhub.core.errors import InvalidInput
from tbhub.core.models import RetentionOverride
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.core.values import format_number
from tbhub.storage.scan import RunInfo

Action = Literal["trash", "archive"]
ACTIONS: tuple[Action, ...] = ("trash", "archive")
OVERRIDABLE = ("max_age_days", "keep_last", "max_project_bytes", "action", "active_minutes")
# Each numeric setting: whole numbers only?, and the largest value its column holds.
NUMERIC_LIMITS: dict[str, tuple[bool, float]] = {
    "max_age_days": (False, DAYS_MAX),
    "keep_last": (True, INT32_MAX),
    "max_project_bytes": (True, INT64_MAX),
    "active_minutes": (False, MINUTES_MAX),
}


@dataclass(frozen=True)
class Policy:
    """Limits of 0 or None are off."""

    max_age_days: float | None = None
    keep_last: int | None = None
    max_project_bytes: int | None = None
    action: Action = "trash"
    active_minutes: float = 60.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def has_limits(self) -> bool:
        return bool(self.max_age_days or self.keep_last or self.max_project_bytes)


def default_policy(settings: Settings) -> Policy:
    """The global policy, from the retention settings."""
    return Policy(
        max_age_days=settings.retention_max_age_days,
        keep_last=settings.retention_keep_last,
        max_project_bytes=settings.retention_max_project_bytes,
        action=settings.retention_action,
        active_minutes=settings.retention_active_minutes,
    )


def override_values(row: RetentionOverride | None) -> dict[str, Any]:
    """A project's overrides (None where it keeps the default)."""
    return {n: (getattr(row, n) if row is not None else None) for n in OVERRIDABLE}


def check_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """Validate override values (None inherits); raise InvalidInput naming the bad one."""
    unknown = set(values) - set(OVERRIDABLE)
    if unknown:
        raise InvalidInput(
            f"unknown retention setting(s) {sorted(unknown)}; use {', '.join(OVERRIDABLE)}"
        )
    for name, value in values.items():
        if value is None:
            continue
        if name == "action":
            if value not in ACTIONS:
                raise InvalidInput(f"action {value!r} is not one of: {', '.join(ACTIONS)}")
            continue
        whole, largest = NUMERIC_LIMITS[name]
        kind = "whole number" if whole else "number"
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= largest
        ):
            raise InvalidInput(
                f"{name} must be a {kind} from 0 to {format_number(largest)} (0 turns it off), not "
                f"{value!r}"
            )
        if whole and int(value) != value:
            raise InvalidInput(f"{name} must be a whole number, not {value!r}")
    return values


def merge(default: Policy, overrides: dict[str, Any]) -> Policy:
    """The effective policy: each override that is not None replaces the default."""
    chosen = {k: v for k, v in overrides.items() if k in OVERRIDABLE and v is not None}
    return replace(default, **chosen)


@dataclass(frozen=True)
class Decision:
    run: RunInfo
    reasons: tuple[str, ...]  # of "max_age", "keep_last", "quota"


@dataclass
class ProjectPlan:
    project: str
    policy: Policy
    remove: list[Decision] = field(default_factory=list)
    kept_runs: int = 0
    kept_bytes: int = 0
    skipped_pinned: int = 0
    skipped_active: int = 0

    @property
    def remove_bytes(self) -> int:
        return sum(d.run.bytes for d in self.remove)

    def summary(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "action": self.policy.action,
            "policy": self.policy.as_dict(),
            "remove_runs": len(self.remove),
            "remove_bytes": self.remove_bytes,
            "kept_runs": self.kept_runs,
            "kept_bytes": self.kept_bytes,
            "skipped_pinned": self.skipped_pinned,
            "skipped_active": self.skipped_active,
            "runs": [
                {
                    "path": d.run.path,
                    "bytes": d.run.bytes,
                    "files": d.run.files,
                    "last_write": iso_utc(d.run.last_write),
                    "reasons": list(d.reasons),
                }
                for d in self.remove
            ],
        }


def plan_project(
    project: str, runs: list[RunInfo], policy: Policy, *, pinned: set[str], now: float
) -> ProjectPlan:
    plan = ProjectPlan(project=project, policy=policy)
    newest_first = sorted(runs, key=lambda r: (-r.last_write, r.path))
    active_since = now - policy.active_minutes * 60
    protected = {
        r.path: ("pinned" if r.path in pinned else "active")
        for r in newest_first
        if r.path in pinned or r.last_write >= active_since
    }
    reasons: dict[str, list[str]] = {r.path: [] for r in newest_first}
    if policy.max_age_days:
        cutoff = now - policy.max_age_days * 86400
        for run in newest_first:
            if run.last_write < cutoff:
                reasons[run.path].append("max_age")
    if policy.keep_last:
        for run in newest_first[policy.keep_last :]:
            reasons[run.path].append("keep_last")
    if policy.max_project_bytes:
        # Bytes that stay after the age and count limits; then the oldest others go first.
        staying = sum(r.bytes for r in newest_first if r.path in protected or not reasons[r.path])
        for run in reversed(newest_first):
            if staying <= policy.max_project_bytes:
                break
            if run.path in protected or reasons[run.path]:
                continue
            reasons[run.path].append("quota")
            staying -= run.bytes
    for run in newest_first:
        why = reasons[run.path]
        if why and run.path in protected:
            if protected[run.path] == "pinned":
                plan.skipped_pinned += 1
            else:
                plan.skipped_active += 1
            why = []
        if why:
            plan.remove.append(Decision(run=run, reasons=tuple(why)))
        else:
            plan.kept_runs += 1
            plan.kept_bytes += run.bytes
    plan.remove.reverse()  # oldest first: the order apply works in
    return plan
