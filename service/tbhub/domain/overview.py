"""What people see of projects, boards and runs at a glance: the state words the pages and
their live updates show, and the projects page's summary of every project (board state,
last activity, runs by status, storage against the quota), in a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tbhub.core.models import (
    Board,
    DesiredState,
    ObservedState,
    Project,
    RetentionOverride,
    RetentionState,
    Role,
    Run,
    RunStatus,
)
from tbhub.domain.boards import failure_reason
from tbhub.domain.retention_policy import Policy, merge, override_values
from tbhub.storage.usage import ProjectUsage

# The order the projects page lists run counts in.
STATUS_ORDER = [s.value for s in RunStatus]


def board_state(board: Board | None) -> str:
    """One word for a board, from the supervisor's observed state and what is wanted:
    live, starting, restarting, stopping, stopped, failed or no-capacity."""
    if board is None:
        return "stopped"
    observed = board.observed_state
    if observed == ObservedState.ready:
        return "restarting" if board.swapping else "live"  # blue/green replacement under way
    if observed == ObservedState.starting:
        return "restarting" if board.failures or board.swapping else "starting"
    if observed == ObservedState.failed:
        return "failed"
    if observed == ObservedState.no_capacity:
        return "no-capacity"
    if observed == ObservedState.stopping:
        return "stopping"
    if board.desired_state == DesiredState.running:  # wanted; waiting for a pass or a backoff
        return "restarting" if board.failures else "starting"
    return "stopped"


def board_detail(board: Board | None) -> str | None:
    """The sentence behind the state word: a standing note, or the last error of a failure."""
    if board is None:
        return None
    if board.status_note:
        return board.status_note
    if board.observed_state == ObservedState.failed:
        return failure_reason(board.last_error)
    return None


def run_state(run: Run, *, now: datetime, stalled_after: timedelta) -> str:
    """A run's status, except that a running run whose files got nothing new for
    `stalled_after` is `stalled`, and a run retention moved shows where it went."""
    if run.retention_state != RetentionState.present:
        return run.retention_state.value
    if run.status == RunStatus.running:
        last = run.last_write or run.created_at
        if now - last > stalled_after:
            return "stalled"
    return run.status.value


@dataclass
class ProjectSummary:
    name: str
    role: Role | None
    board_state: str
    board_detail: str | None
    last_activity: datetime | None = None
    runs: dict[str, int] = field(default_factory=dict)  # status -> count (present runs)
    bytes_used: int = 0
    quota: int | None = None  # the effective retention max_project_bytes; None: no quota

    @property
    def run_total(self) -> int:
        return sum(self.runs.values())

    @property
    def quota_share(self) -> float | None:
        return self.bytes_used / self.quota if self.quota else None


def _latest(*moments: datetime | None) -> datetime | None:
    known = [m for m in moments if m is not None]
    return max(known) if known else None


def summarize_projects(
    session: Session,
    projects: list[tuple[Project, Role | None]],
    *,
    default_policy: Policy,
    usage: ProjectUsage,
) -> list[ProjectSummary]:
    """The summaries of `projects` (boards loaded with them), with two more queries: run
    counts by status, and the retention overrides that set each quota."""
    summaries = {
        p.id: ProjectSummary(p.name, role, board_state(p.board), board_detail(p.board),
                             last_activity=p.board.last_access_at if p.board else None)
        for p, role in projects
    }  # fmt: skip
    if not summaries:
        return []
    ids = list(summaries)
    counts = (
        select(Run.project_id, Run.status, func.count(), func.sum(Run.bytes),
               func.max(Run.last_write), func.max(Run.updated_at))
        .where(Run.retention_state == RetentionState.present)
        .group_by(Run.project_id, Run.status)
    )  # fmt: skip
    overrides = select(RetentionOverride)
    if len(ids) <= 500:  # a bounded IN list; beyond it, every project is cheaper to read
        counts = counts.where(Run.project_id.in_(ids))
        overrides = overrides.where(RetentionOverride.project_id.in_(ids))
    summed: dict[int, int] = {}
    for project_id, status, count, total, last_write, updated in session.execute(counts):
        summary = summaries.get(project_id)
        if summary is None:
            continue
        summary.runs[status.value] = count
        summed[project_id] = summed.get(project_id, 0) + int(total or 0)
        summary.last_activity = _latest(summary.last_activity, last_write, updated)
    quotas = {
        row.project_id: merge(default_policy, override_values(row)).max_project_bytes
        for row in session.scalars(overrides)
    }
    for project_id, summary in summaries.items():
        known = usage.known_bytes(summary.name)
        summary.bytes_used = known if known is not None else summed.get(project_id, 0)
        summary.quota = quotas.get(project_id, default_policy.max_project_bytes) or None
    return list(summaries.values())


def matching(
    projects: list[tuple[Project, Role | None]], text: str | None
) -> list[tuple[Project, Role | None]]:
    """The projects whose name holds `text` (any case); all of them for no text."""
    needle = (text or "").strip().lower()
    return [(p, role) for p, role in projects if needle in p.name]
