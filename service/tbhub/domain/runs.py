"""The run registry: keyword-only service functions that hold the queries.

A run registered through the API gets `<group>/<YYYYmmdd-HHMMSS>-<name>` under its project
(DESIGN.md, storage layout), with `-2`, `-3`, ... when that directory is taken.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Select, Table, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import InvalidInput, NotFound
from tbhub.core.models import (
    Project,
    RetentionState,
    Run,
    RunEvent,
    RunParam,
    RunSource,
    RunStatus,
    RunTag,
)
from tbhub.domain import audit
from tbhub.domain.run_params import ParamFilter, new_param_rows, sync_params, with_param_filters
from tbhub.storage.fsops import open_below
from tbhub.storage.paths import open_project, project_path

_RUNS, _TAGS, _PARAMS, _EVENTS = (cast(Table, model.__table__)
                                   for model in (Run, RunTag, RunParam, RunEvent))  # fmt: skip
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+,@-]{0,99}")
TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:=+/-]{0,63}")
MAX_GROUP_DEPTH = 4
MAX_SUFFIX = 1000
TERMINAL = frozenset({RunStatus.finished, RunStatus.failed, RunStatus.killed})
# Journal states (jobs/journal.py) and what they mean for a registered run.
RETENTION_OF_JOURNAL = {
    "trashed": RetentionState.trashed,
    "archived": RetentionState.archived,
    "restored": RetentionState.present,
    "purged": RetentionState.purged,
}


def check_run_name(name: str) -> str:
    if ".." in name or not RUN_NAME.fullmatch(name):
        raise InvalidInput(
            f"run name {name!r} is not allowed: use 1-100 letters, digits and '._=+,@-', "
            "starting with a letter or digit, without '..' (for example 'resnet50-lr0.1')"
        )
    return name


def check_group(group: str | None) -> list[str]:
    """A group is up to four run-name-like parts joined by '/', e.g. 'ablations/lr'."""
    if group is None or group == "":
        return []
    parts = group.split("/")
    if len(parts) > MAX_GROUP_DEPTH or any(".." in p or not RUN_NAME.fullmatch(p) for p in parts):
        raise InvalidInput(
            f"group {group!r} is not allowed: use up to {MAX_GROUP_DEPTH} parts joined by '/', "
            "each 1-100 letters, digits and '._=+,@-' starting with a letter or digit, "
            "no '..' and no leading '/' (for example 'ablations/lr')"
        )
    return parts


def check_tags(tags: list[str]) -> list[str]:
    for tag in tags:
        if not TAG.fullmatch(tag):
            raise InvalidInput(
                f"tag {tag!r} is not allowed: use 1-64 letters, digits and '._:=+/-', "
                "starting with a letter or digit"
            )
    return sorted(set(tags))


def like_escape(text: str) -> str:
    """`text` as a literal inside a LIKE pattern (escape character: backslash)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def run_logdir(storage_root: Path, project: str, run: Run) -> Path:
    """Where the run's files are, as a name only (the API shows it): no filesystem is read,
    so listing runs never waits on a hung network mount."""
    return project_path(storage_root, project) / run.path


def upload_url(project: str, run_id: int) -> str:
    return f"/api/v1/projects/{project}/runs/{run_id}/files/"


@dataclass(frozen=True)
class RunFields:
    """What a job may tell about its run when it registers it."""

    hparams: dict[str, Any]
    tags: list[str]
    git_commit: str | None = None
    git_branch: str | None = None
    git_dirty: bool | None = None
    dataset_version: str | None = None
    command: str | None = None
    host: str | None = None
    notes: str | None = None
    status: RunStatus = RunStatus.running


class _Taken(Exception):
    """The candidate directory exists on disk already; try the next suffix."""


def _taken(session: Session, project_id: int, stem: str) -> set[str]:
    """The paths the registry holds at `stem` or `stem-<anything>`."""
    return set(
        session.scalars(
            select(Run.path).where(
                Run.project_id == project_id,
                or_(Run.path == stem, Run.path.like(like_escape(stem) + "-%", escape="\\")),
            )
        )
    )


def _candidates(factory: sessionmaker[Session], project_id: int, stem: str) -> Iterator[str]:
    """`stem`; when that is taken, `stem-2`, `stem-3`, ... skipping the paths the registry
    already holds. Most names are free at the first try, which then costs no lookup."""
    yield stem
    with factory() as probe:
        taken = _taken(probe, project_id, stem)
    for k in range(2, MAX_SUFFIX + 1):
        candidate = f"{stem}-{k}"
        if candidate not in taken:
            yield candidate


@contextmanager
def _made_dir(parent_fd: int, name: str) -> Iterator[None]:
    """mkdir `name` in `parent_fd` (it must not exist); remove it again if the block fails."""
    try:
        os.mkdir(name, 0o777, dir_fd=parent_fd)
    except FileExistsError:
        raise _Taken from None
    try:
        yield
    except BaseException:
        with suppress(OSError):  # someone wrote into it meanwhile: leave it, it is theirs
            os.rmdir(name, dir_fd=parent_fd)
        raise


@contextmanager
def _group_dir(storage_root: Path, project: str, group_parts: list[str]) -> Iterator[int]:
    """The group's directory in the project, made if missing, walked by descriptor from a
    project directory that obeys storage/paths.py's rule: no symlink is followed, so nothing
    is created in another project or outside the storage."""
    project_fd = open_project(storage_root, project, create=True)
    try:
        fd = open_below(project_fd, group_parts, create=True)
    finally:
        os.close(project_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def register_run(
    factory: sessionmaker[Session],
    *,
    storage_root: Path,
    project: str,
    project_id: int,
    name: str,
    group: str | None,
    fields: RunFields,
    actor: str,
    now: datetime | None = None,
) -> Run:
    """Insert the row and create its directory, both or neither, and commit."""
    check_run_name(name)
    group_parts = check_group(group)
    tags = check_tags(fields.tags)
    now = now or datetime.now(UTC)
    with _group_dir(storage_root, project, group_parts) as parent_fd:
        return _register_in(factory, parent_fd, project, project_id, name, group_parts,
                            fields, tags, actor, now)  # fmt: skip


def _register_in(
    factory: sessionmaker[Session],
    parent_fd: int,
    project: str,
    project_id: int,
    name: str,
    group_parts: list[str],
    fields: RunFields,
    tags: list[str],
    actor: str,
    now: datetime,
) -> Run:
    stem = "/".join([*group_parts, f"{now:%Y%m%d-%H%M%S}-{name}"])
    for path in _candidates(factory, project_id, stem):
        try:
            leaf = path.rpartition("/")[2]
            with transaction(factory) as session, _made_dir(parent_fd, leaf):
                run = _insert_run(session, project, path, project_id, name, group_parts,
                                  fields, tags, actor, now)  # fmt: skip
            return run
        except (_Taken, IntegrityError):
            continue  # another registration or a directory on disk got there first
    raise InvalidInput(
        f"{MAX_SUFFIX} runs named {name!r} were registered this second; pick another name"
    )


def _insert_run(
    session: Session,
    project: str,
    path: str,
    project_id: int,
    name: str,
    group_parts: list[str],
    fields: RunFields,
    tags: list[str],
    actor: str,
    now: datetime,
) -> Run:
    """The run's row, its tags, parameter rows, first status event and audit row, as a few
    Core INSERTs on the caller's transaction's connection: only the new id comes back, and
    the run answered is built from the values written (every column given, none left to a
    default), with no ORM bulk insert, identity map or row loading (issue 19: most of a
    registration's CPU was SQLAlchemy's bookkeeping around these statements)."""
    values: dict[str, Any] = {
        "project_id": project_id, "path": path, "name": name,
        "group": "/".join(group_parts) or None, "status": fields.status,
        "source": RunSource.api, "retention_state": RetentionState.present,
        "trash_entry_id": None, "hparams": fields.hparams, "metrics": {},
        "git_commit": fields.git_commit, "git_branch": fields.git_branch,
        "git_dirty": fields.git_dirty, "dataset_version": fields.dataset_version,
        "command": fields.command, "host": fields.host, "notes": fields.notes,
        "created_by": actor, "created_at": now, "updated_at": now,
        "finished_at": now if fields.status in TERMINAL else None,
        "first_write": None, "last_write": None, "bytes": 0, "files": 0,
        "hparams_file_error": None, "logged_hparams": None, "logged_metrics": None,
    }  # fmt: skip
    connection = session.connection()
    row = {"group_name" if k == "group" else k: v for k, v in values.items()}  # its column
    key = connection.execute(_RUNS.insert(), row).inserted_primary_key
    assert key is not None  # a single-row INSERT always has one
    run_id = int(key[0])
    run = Run(id=run_id, **values, tag_rows=[RunTag(run_id=run_id, tag=t) for t in tags])
    if tags:
        connection.execute(_TAGS.insert(), [{"run_id": run_id, "tag": t} for t in tags])
    params = new_param_rows(run)
    if params:
        connection.execute(_PARAMS.insert(), params)
    connection.execute(_EVENTS.insert(), {"run_id": run_id, "kind": "status",
                                          "value": fields.status.value, "actor": actor,
                                          "at": now})  # fmt: skip
    audit.insert(session, actor=actor, action="run.create", target=f"{project}/{path}", id=run_id)
    return run


def get_run(session: Session, *, project_id: int, run_id: int) -> Run:
    run = session.get(Run, run_id)
    if run is None or run.project_id != project_id:
        raise NotFound(f"no run {run_id} in this project; list them with GET .../runs")
    return run


def is_registered(session: Session, *, project_id: int, run_path: str) -> bool:
    """A run the registry holds at `run_path`, still in its place."""
    found = session.scalar(
        select(Run.id).where(
            Run.project_id == project_id,
            Run.path == run_path,
            Run.retention_state == RetentionState.present,
        )
    )
    return found is not None


def registered_paths(session: Session, *, project: str) -> frozenset[str]:
    """The paths of the project's runs registered through the API and still in place: each
    owns everything under its directory, event files in subdirectories too (jobs/scan.py)."""
    query = (
        select(Run.path)
        .join(Project, Project.id == Run.project_id)
        .where(
            Project.name == project,
            Run.source == RunSource.api,
            Run.retention_state == RetentionState.present,
        )
    )
    return frozenset(session.scalars(query))


@dataclass(frozen=True)
class RunFilter:
    status: list[RunStatus] | None = None
    tag: str | None = None
    group: str | None = None
    text: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    include_removed: bool = False
    params: tuple[ParamFilter, ...] = ()  # hparam./metric. conditions (domain/run_params.py)


def run_query(project_id: int, flt: RunFilter) -> Select[Run]:
    query = select(Run).where(Run.project_id == project_id)
    if flt.status:
        query = query.where(Run.status.in_(flt.status))
    if flt.tag is not None:
        query = query.where(Run.tag_rows.any(RunTag.tag == flt.tag))
    if flt.group is not None:
        query = query.where(Run.group == flt.group)
    if flt.text:
        needle = "%" + like_escape(flt.text.lower()) + "%"
        query = query.where(
            or_(
                func.lower(Run.path).like(needle, escape="\\"),
                func.lower(func.coalesce(Run.notes, "")).like(needle, escape="\\"),
            )
        )
    if flt.since is not None:
        query = query.where(Run.created_at >= flt.since)
    if flt.until is not None:
        query = query.where(Run.created_at < flt.until)
    if not flt.include_removed:
        query = query.where(Run.retention_state == RetentionState.present)
    return with_param_filters(query, flt.params)


def list_runs(
    session: Session, *, project_id: int, flt: RunFilter, limit: int, cursor: int | None
) -> tuple[list[Run], int | None]:
    """Newest first; `cursor` is the id the previous page ended at."""
    query = run_query(project_id, flt)
    if cursor is not None:
        query = query.where(Run.id < cursor)
    rows = list(session.scalars(query.order_by(Run.id.desc()).limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1].id if more and rows else None)


# The orders the project page offers, by the name its URL uses.
SORTS = {
    "created": Run.id,
    "name": Run.name,
    "status": Run.status,
    "last_write": Run.last_write,
    "size": Run.bytes,
}


def page_runs(
    session: Session,
    *,
    project_id: int,
    flt: RunFilter,
    sort: str = "created",
    descending: bool = True,
    offset: int = 0,
    limit: int = 50,
) -> tuple[list[Run], int]:
    """One page of the runs `flt` matches in the order asked for (runs without a value
    last), and how many match in all: the project page's table. The filter is the API's."""
    query = run_query(project_id, flt)
    total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery()))
    column = SORTS[sort]
    first = column.desc() if descending else column.asc()
    then = Run.id.desc() if descending else Run.id.asc()
    order = [then] if column is Run.id else [first.nulls_last(), then]
    rows = session.scalars(query.order_by(*order).offset(offset).limit(limit))
    return list(rows), int(total or 0)


def note_event(
    session: Session, run: Run, kind: str, value: str, *, actor: str, at: datetime | None = None
) -> None:
    """Add to a run's history (the run page's "status history"), in the caller's transaction
    (a new run is inserted first)."""
    session.add(RunEvent(run=run, kind=kind, value=value, actor=actor,
                         at=at or datetime.now(UTC)))  # fmt: skip


def run_history(session: Session, *, run: Run, limit: int = 200) -> list[RunEvent]:
    """The run's newest events first, at most `limit`."""
    query = select(RunEvent).where(RunEvent.run_id == run.id)
    query = query.order_by(RunEvent.id.desc()).limit(limit)
    return list(session.scalars(query))


def update_run(
    session: Session,
    *,
    run: Run,
    project: str,
    status: RunStatus | None,
    metrics: dict[str, float] | None,
    notes: str | None,
    tags: list[str] | None,
    actor: str,
    hparams: dict[str, Any] | None = None,
    dataset_version: str | None = None,
) -> Run:
    """Set the status, merge summary metrics and hyperparameters, replace notes, tags or the
    dataset version: all or nothing."""
    now = datetime.now(UTC)
    if status is not None:
        if status == RunStatus.discovered:
            raise InvalidInput("status 'discovered' is tbhub's own; use running, finished, "
                               "failed or killed")  # fmt: skip
        if status != run.status:
            note_event(session, run, "status", status.value, actor=actor, at=now)
        run.status = status
        run.finished_at = now if status in TERMINAL else None
    if metrics is not None:
        merged = {**run.metrics, **metrics}
        if len(merged) > 256:
            raise InvalidInput("a run keeps at most 256 summary metrics; drop some")
        run.metrics = merged
    if hparams is not None:
        merged_hparams = {**run.hparams, **hparams}
        if len(merged_hparams) > 256:
            raise InvalidInput("a run keeps at most 256 hyperparameters; drop some")
        run.hparams = merged_hparams
    if metrics is not None or hparams is not None:
        sync_params(session, run)
    if notes is not None:
        run.notes = notes
    if dataset_version is not None:
        run.dataset_version = dataset_version
    if tags is not None:
        wanted = check_tags(tags)
        run.tag_rows = [row for row in run.tag_rows if row.tag in wanted] + [
            RunTag(tag=t) for t in wanted if t not in run.tags
        ]
    run.updated_at = now
    audit.record(
        session,
        actor=actor,
        action="run.update",
        target=f"{project}/{run.path}",
        status=run.status.value,
    )
    session.flush()
    return run


def mark_retention(
    session: Session,
    *,
    project: str,
    run_path: str,
    journal_state: str,
    trash_id: int,
    actor: str = "retention",
) -> None:
    """Keep the registry true when retention, `trash restore` or purge move a directory: the
    runs at `run_path` or below it take the new state."""
    state = RETENTION_OF_JOURNAL.get(journal_state)
    if state is None:
        return
    project_id = session.scalar(select(Project.id).where(Project.name == project))
    if project_id is None:
        return
    below = like_escape(run_path) + "/%"
    for run in session.scalars(
        select(Run).where(
            Run.project_id == project_id,
            or_(Run.path == run_path, Run.path.like(below, escape="\\")),
        )
    ):
        if run.retention_state != state:
            note_event(session, run, "retention", state.value, actor=actor)
        run.retention_state = state
        run.trash_entry_id = None if state == RetentionState.present else trash_id
        run.updated_at = datetime.now(UTC)


def mark_present_again(session: Session, *, storage_root: Path, project: str | None) -> int:
    """After a backup restore: runs whose directory exists again are present again."""
    query = (
        select(Run, Project.name).join(Project).where(Run.retention_state != RetentionState.present)
    )
    if project is not None:
        query = query.where(Project.name == project)
    count = 0
    for run, name in session.execute(query):
        if os.path.isdir(storage_root / name / run.path):
            note_event(session, run, "retention", RetentionState.present.value,
                       actor="backup restore")  # fmt: skip
            run.retention_state = RetentionState.present
            run.trash_entry_id = None
            count += 1
    return count
