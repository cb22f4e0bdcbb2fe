"""Retention: load policies, plan (the dry run), and apply a plan through the trash journal."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete as sa_delete
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import JobBusy, NotFound, StorageUnavailable, TbhubError, UnsafePath
from tbhub.core.models import PinnedRun, Project, RetentionOverride, TrashEntry
from tbhub.core.settings import Settings
from tbhub.domain import audit
from tbhub.domain.projects import get_project, list_projects
from tbhub.domain.retention_policy import (
    Decision,
    Policy,
    ProjectPlan,
    check_overrides,
    default_policy,
    merge,
    override_values,
    plan_project,
)
from tbhub.domain.run_names import similar_runs_hint
from tbhub.domain.runs import is_registered, registered_paths
from tbhub.housekeeping.archive import archive_paths, write_archive
from tbhub.housekeeping.config import archive_root, job_lock
from tbhub.housekeeping.journal import finish_archive, finish_trash, move_into_trash, recover, utc
from tbhub.storage.fsops import is_real_dir, parent_of, require_safe_rmtree, split_relative
from tbhub.storage.paths import project_dir
from tbhub.storage.scan import (
    NONE_CLAIMED,
    Claimed,
    RunInfo,
    ScanItem,
    measure_dir,
    scan_projects,
)

log = logging.getLogger("tbhub.retention")


@dataclass(frozen=True)
class ProjectPolicy:
    project: str
    policy: Policy
    pinned: frozenset[str]


def load_policies(
    session: Session, settings: Settings, *, project: str | None = None
) -> list[ProjectPolicy]:
    projects = [get_project(session, name=project)] if project else list_projects(session)
    default = default_policy(settings)
    result = []
    for row in projects:
        override = session.get(RetentionOverride, row.id)
        pins = session.scalars(select(PinnedRun.run_path).where(PinnedRun.project_id == row.id))
        result.append(
            ProjectPolicy(row.name, merge(default, override_values(override)), frozenset(pins))
        )
    return result


def plan_retention(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    project: str | None = None,
    now: float | None = None,
) -> list[ProjectPlan]:
    """The dry run: what apply would do now, per project. Reads the disk, changes nothing."""
    with factory() as session:
        policies = load_policies(session, settings, project=project)
        claimed = {p.project: registered_paths(session, project=p.project) for p in policies}
    now = time.time() if now is None else now
    usable: list[ProjectPolicy] = []
    dirs: list[ScanItem] = []
    for item in policies:
        try:
            directory = str(project_dir(settings.storage, item.project))
            dirs.append((directory, item.project, claimed[item.project]))
        except UnsafePath as exc:
            if project is not None:
                raise
            # One refused project directory (a symlink to another project) must not stop
            # retention for all the others, nor be walked into.
            log.error("retention skips project %s: %s", item.project, exc.message)
            continue
        usable.append(item)
    scanned = scan_projects(dirs)
    refuse_partial([item.project for item, runs in zip(usable, scanned, strict=True)
                    if runs is None])  # fmt: skip
    return [
        plan_project(item.project, runs or [], item.policy, pinned=set(item.pinned), now=now)
        for item, runs in zip(usable, scanned, strict=True)
    ]


def refuse_partial(unreadable: list[str]) -> None:
    """Retention decides from complete listings only: a project whose storage could not be
    listed to the end (a dropped or stale network mount) stops the whole run, before
    anything is moved. With part of a listing, "keep the newest N" would keep the wrong N."""
    if unreadable:
        raise StorageUnavailable(
            f"retention did nothing: the storage of {', '.join(sorted(unreadable))} could not "
            "be listed (its network mount is disconnected or not answering), and retention "
            "never decides from a partial listing; remount it, then run retention again"
        )


def _listed(settings: Settings, project: str, claimed: Claimed = NONE_CLAIMED) -> list[RunInfo]:
    """Every run of one project, or StorageUnavailable if its listing met a lost mount."""
    runs = scan_projects([(str(project_dir(settings.storage, project)), project, claimed)])[0]
    if runs is None:
        refuse_partial([project])
    return runs or []


@dataclass
class ApplyReport:
    trashed: int = 0
    archived: int = 0
    bytes: int = 0
    recovered: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "trashed": self.trashed,
            "archived": self.archived,
            "bytes": self.bytes,
            "recovered": self.recovered,
            "skipped": self.skipped,
        }


def apply_plans(
    factory: sessionmaker[Session],
    settings: Settings,
    plans: list[ProjectPlan],
    *,
    actor: str,
    on_progress: Callable[[int], None] = lambda _bytes: None,
) -> ApplyReport:
    """Carry out `plans` (oldest run first), after finishing whatever a crash left half-done."""
    require_safe_rmtree()
    report = ApplyReport()
    with job_lock(settings, "retention"):
        report.recovered = recover(factory, settings, actor=actor)
        for plan in plans:
            for decision in plan.remove:
                _apply_one(factory, settings, plan.policy, decision, actor=actor, report=report)
                on_progress(decision.run.bytes)
    return report


def _apply_one(
    factory: sessionmaker[Session],
    settings: Settings,
    policy: Policy,
    decision: Decision,
    *,
    actor: str,
    report: ApplyReport,
) -> int | None:
    """Trash or archive one run; its trash id, or None when it was skipped."""
    run = decision.run
    parts = split_relative(run.path)
    leaf = parts[-1]
    with transaction(factory) as session:
        entry = TrashEntry(
            project=run.project,
            run_path=run.path,
            action=policy.action,
            state="moving" if policy.action == "trash" else "archiving",
            bytes=run.bytes,
            files=run.files,
            last_write=utc(run.last_write) if run.last_write else None,
            reasons=list(decision.reasons),
            actor=actor,
        )
        session.add(entry)
        session.flush()
        entry_id = entry.id
    target = f"{run.project}/{run.path}"
    try:
        project_dir(settings.storage, run.project)  # a slug, resolving inside the root
        with parent_of(settings.storage, [run.project, *parts]) as parent_fd:
            if not is_real_dir(parent_fd, leaf):
                raise _Skip("it is gone")
            if measure_dir(parent_fd, leaf)[2] > run.last_write:
                raise _Skip("it was written to after the plan was made")
            if policy.action == "archive":
                tarball, manifest = archive_paths(
                    archive_root(settings), run.project, entry_id, leaf
                )
                write_archive(parent_fd, leaf, tarball, manifest)
            move_into_trash(settings, entry_id, parent_fd, leaf, target)
    except (_Skip, TbhubError, OSError) as exc:
        reason = exc.message if isinstance(exc, TbhubError) else str(exc)
        with transaction(factory) as session:
            entry = session.get_one(TrashEntry, entry_id)
            entry.state, entry.error, entry.finished_at = "skipped", reason, utc(time.time())
            audit.record(session, actor=actor, action="retention.skip", target=target, why=reason)
        report.skipped.append({"run": target, "why": reason})
        return None
    if policy.action == "trash":
        finish_trash(factory, entry_id, actor=actor)
        report.trashed += 1
    else:
        finish_archive(factory, settings, entry_id, actor=actor)
        report.archived += 1
    report.bytes += run.bytes
    return entry_id


def trash_one(
    factory: sessionmaker[Session], settings: Settings, *, project: str, run_path: str, actor: str
) -> int | None:
    """Move one run to the trash now, through the same journal as retention (a DELETE of a
    registered run). Its trash id, or None when its directory is gone already."""
    require_safe_rmtree()
    parts = split_relative(run_path)
    with job_lock(settings, "retention"):
        recover(factory, settings, actor=actor)
        project_dir(settings.storage, project)
        with parent_of(settings.storage, [project, *parts]) as parent_fd:
            if not is_real_dir(parent_fd, parts[-1]):
                return None
            size, files, last_write = measure_dir(parent_fd, parts[-1])
        report = ApplyReport()
        decision = Decision(RunInfo(project, run_path, size, files, last_write), ("deleted",))
        entry_id = _apply_one(
            factory, settings, Policy(action="trash"), decision, actor=actor, report=report
        )
    if entry_id is None:
        why = report.skipped[0]["why"] if report.skipped else "unknown"
        raise JobBusy(f"could not move {project}/{run_path} to the trash ({why}); try again")
    return entry_id


class _Skip(Exception):
    """The run is no longer as planned; leave it where it is."""


# -- policy changes (CLI and API) ---------------------------------------------------------


def set_override(
    session: Session, *, project: str, values: dict[str, Any], actor: str
) -> dict[str, Any]:
    """Set some of a project's overrides (None = inherit the default); returns all of them."""
    check_overrides(values)
    row = get_project(session, name=project)
    override = session.get(RetentionOverride, row.id)
    if override is None:
        override = RetentionOverride(project_id=row.id, updated_by=actor)
        session.add(override)
    for name, value in values.items():
        setattr(override, name, value)
    override.updated_by, override.updated_at = actor, utc(time.time())
    audit.record(session, actor=actor, action="retention.policy", target=project, changes=values)
    session.flush()
    return override_values(override)


def check_run_exists(settings: Settings, *, project: str, run_path: str) -> None:
    """Refuse a run that is not there now, naming the project's runs that look like it."""
    split_relative(run_path)
    runs = [run.path for run in _listed(settings, project)]
    if run_path in runs:
        return
    hint = similar_runs_hint(
        run_path, runs,
        otherwise=f"{project} has {len(runs)} run(s); list them with `tbhub admin retention "
        f"plan --project {project} --json` or look under its storage directory",
    )  # fmt: skip
    raise NotFound(f"{project} has no run {run_path!r} (a directory holding event files); {hint}")


def pin_run(
    session: Session, settings: Settings, *, project: str, run_path: str, actor: str
) -> None:
    """Pin a run that exists now (or is registered). Pinning ahead of a run's first event
    file is refused otherwise: a typo would protect nothing and say nothing."""
    row = get_project(session, name=project)
    if not is_registered(session, project_id=row.id, run_path=run_path):
        check_run_exists(settings, project=project, run_path=run_path)
    exists = session.scalar(
        select(PinnedRun).where(PinnedRun.project_id == row.id, PinnedRun.run_path == run_path)
    )
    if exists is None:
        session.add(PinnedRun(project_id=row.id, run_path=run_path, pinned_by=actor))
        audit.record(session, actor=actor, action="retention.pin", target=f"{project}/{run_path}")
        session.flush()


def unpin_run(session: Session, *, project: str, run_path: str, actor: str) -> None:
    row = get_project(session, name=project)
    pin = session.scalar(
        select(PinnedRun).where(PinnedRun.project_id == row.id, PinnedRun.run_path == run_path)
    )
    if pin is None:
        raise NotFound(f"run {run_path!r} of {project} is not pinned")
    session.delete(pin)
    audit.record(session, actor=actor, action="retention.unpin", target=f"{project}/{run_path}")
    session.flush()


def describe_policy(session: Session, settings: Settings, *, project: str) -> dict[str, Any]:
    """What the CLI and API show for a project: effective policy, overrides, pins."""
    row = get_project(session, name=project)
    override = override_values(session.get(RetentionOverride, row.id))
    pins = session.scalars(
        select(PinnedRun.run_path)
        .where(PinnedRun.project_id == row.id)
        .order_by(PinnedRun.run_path)
    )
    return {
        "project": project,
        "effective": merge(default_policy(settings), override).as_dict(),
        "overrides": override,
        "default": default_policy(settings).as_dict(),
        "pinned": list(pins),
    }


# -- deleting a project (admin CLI and API) -----------------------------------------------------


def delete_project(
    factory: sessionmaker[Session], settings: Settings, *, project: str, actor: str
) -> ApplyReport:
    """Every run of the project goes to the trash through the journal (restorable with
    `tbhub admin trash restore` until it is purged), then the project's rows go: members,
    team roles, board, policy, pins and share links. If any run could not be moved, the
    project stays and the error names them; run it again once they are free."""
    with factory() as session:
        get_project(session, name=project)
        claimed = registered_paths(session, project=project)
    runs = _listed(settings, project, claimed)
    plan = ProjectPlan(project=project, policy=Policy(action="trash"),
                       remove=[Decision(run, ("project_deleted",)) for run in runs])  # fmt: skip
    report = apply_plans(factory, settings, [plan], actor=actor)
    if report.skipped:
        stuck = ", ".join(f"{s['run']} ({s['why']})" for s in report.skipped[:5])
        raise JobBusy(
            f"{len(report.skipped)} run(s) of {project} could not be moved to the trash: "
            f"{stuck}; the project stays; try again"
        )
    with transaction(factory) as session:
        # The database cascades to every row that belongs to the project.
        session.execute(sa_delete(Project).where(Project.name == project))
        audit.record(session, actor=actor, action="project.delete", target=project,
                     trashed_runs=report.trashed, bytes=report.bytes)  # fmt: skip
    return report
