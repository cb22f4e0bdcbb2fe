"""SQLAlchemy tables. Metadata only: event data stays in files (DESIGN.md, decision 11)."""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.sql.expression import false

from tbhub.core.bounds import AUDIT_TARGET_MAX


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores UTC; always hands back aware datetimes, on SQLite as on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    pass


class Role(enum.StrEnum):
    viewer = "viewer"
    editor = "editor"
    owner = "owner"

    @property
    def rank(self) -> int:
        return ("viewer", "editor", "owner").index(self.value)


class DesiredState(enum.StrEnum):
    running = "running"
    stopped = "stopped"


class ObservedState(enum.StrEnum):
    stopped = "stopped"
    starting = "starting"
    ready = "ready"
    stopping = "stopping"
    failed = "failed"
    no_capacity = "no_capacity"  # the host's memory budget has no room and nothing can go


class RestartReason(enum.StrEnum):
    memory = "memory"
    crash = "crash"
    oom = "oom"  # a container killed by the kernel at its cgroup memory limit
    hung = "hung"
    spec = "spec"
    admin = "admin"


# The ids a cookie, token, pass or cache carries are never given out again: SQLite, without
# AUTOINCREMENT, would hand a deleted row's id (the highest) to the next row; PostgreSQL's
# sequences never go back.
NEVER_REUSED = {"sqlite_autoincrement": True}


class User(Base):
    __tablename__ = "users"
    __table_args__ = (
        UniqueConstraint("oidc_issuer", "oidc_subject", name="uq_users_oidc_identity"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    is_admin: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    # An OIDC account is keyed by (issuer, subject), never by email; name and email are
    # synced from the provider at each sign-in.
    oidc_issuer: Mapped[str | None] = mapped_column(String(255))
    oidc_subject: Mapped[str | None] = mapped_column(String(255))
    email: Mapped[str | None] = mapped_column(String(255))
    display_name: Mapped[str | None] = mapped_column(String(255))
    # A disabled account keeps its data but gets in nowhere. Raising session_epoch ends
    # every session issued before (sign out everywhere, a password change).
    disabled: Mapped[bool] = mapped_column(default=False, server_default=false())
    session_epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="user", cascade="all, delete-orphan"
    )


class UserSession(Base):
    """One signed-in browser: its cookie carries the random id whose SHA-256 is `id_hash`.
    Signing out deletes the row, and the cookie (and every board cookie made from it) is
    refused from then on; deleting the user deletes its rows."""

    __tablename__ = "user_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = NEVER_REUSED

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    memberships: Mapped[list[Membership]] = relationship(
        back_populates="project", cascade="all, delete-orphan"
    )
    board: Mapped[Board | None] = relationship(
        back_populates="project", cascade="all, delete-orphan"
    )


class Membership(Base):
    __tablename__ = "memberships"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[Role] = mapped_column(Enum(Role, native_enum=False, length=16))

    user: Mapped[User] = relationship(back_populates="memberships")
    project: Mapped[Project] = relationship(back_populates="memberships")


class Team(Base):
    """People who get project roles together; members may be synced from an OIDC group."""

    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TeamMember(Base):
    __tablename__ = "team_members"

    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"),
                                         primary_key=True)  # fmt: skip
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)  # fmt: skip
    source: Mapped[str] = mapped_column(String(16), default="manual")  # manual | oidc


class TeamRole(Base):
    """A team's role in a project: every member has it (or more, through their own)."""

    __tablename__ = "team_roles"

    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"),
                                         primary_key=True)  # fmt: skip
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True)  # fmt: skip
    role: Mapped[Role] = mapped_column(Enum(Role, native_enum=False, length=16))


class ShareLink(Base):
    """A read-only link to one board; only a hash of its token is stored."""

    __tablename__ = "share_links"
    __table_args__ = NEVER_REUSED

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            index=True)  # fmt: skip
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    note: Mapped[str | None] = mapped_column(String(255))


class BoardState:
    """What should run (desired) and what the supervisor saw (observed): the columns every
    board row carries, a project's (`boards`) and a compare board's (`compare_boards`)."""

    desired_state: Mapped[DesiredState] = mapped_column(
        Enum(DesiredState, native_enum=False, length=16), default=DesiredState.stopped
    )
    desired_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_access_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    observed_state: Mapped[ObservedState] = mapped_column(
        Enum(ObservedState, native_enum=False, length=16), default=ObservedState.stopped
    )
    observed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    upstream: Mapped[str | None] = mapped_column(String(255))
    instance_id: Mapped[str | None] = mapped_column(String(64))
    last_error: Mapped[str | None] = mapped_column(Text)
    # Consecutive crashes or failed starts, and when the next start may be tried.
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # -- healing (supervisor/plan.py) --
    # A standing condition shown with the status (memory backoff, no capacity).
    status_note: Mapped[str | None] = mapped_column(Text)
    pss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # The instance that stopped serving at `draining_since` and finishes its requests.
    draining_instance_id: Mapped[str | None] = mapped_column(String(64))
    draining_since: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A memory limit below the working set: backoff level and no memory restart before.
    memory_backoffs: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    memory_retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A replacement starts or the old board drains (the auth hook then caches nothing).
    swapping: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # An operator asked for a restart: instances started before this are replaced.
    restart_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Restarts so far by reason (RestartReason values -> count).
    restarts: Mapped[dict[str, int] | None] = mapped_column(JSON, default=dict)
    # The plugins the serving instance left out because they failed to import or load:
    # [{"plugin", "error"}] from its log (board_process.report_plugin_error).
    plugin_errors: Mapped[list[dict[str, str]] | None] = mapped_column(JSON)


class Board(BoardState, Base):
    """One row per project: its board's desired and observed state."""

    __tablename__ = "boards"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )

    project: Mapped[Project] = relationship(back_populates="board")


class BoardSettings(Base):
    """A project's board settings; NULL inherits the global default."""

    __tablename__ = "board_settings"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    reload_interval: Mapped[int | None] = mapped_column(Integer)
    samples_per_plugin: Mapped[str | None] = mapped_column(String(255))
    memory_limit: Mapped[int | None] = mapped_column(BigInteger)
    pinned: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Plugins that are off by default and that this project opted back into.
    plugins: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Dashboards (TensorBoard plugin names) this audience may not see (domain/dashboards.py).
    restricted_dashboards: Mapped[list[str]] = mapped_column(
        JSON, default=list, server_default="[]"
    )
    restricted_audience: Mapped[str | None] = mapped_column(String(16))  # None: both
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(64))


class AuditEvent(Base):
    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    actor: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(AUDIT_TARGET_MAX))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


# -- retention and backup (jobs/) -------------------------------------------------------------


class RetentionOverride(Base):
    """A project's retention settings; NULL inherits the global default, 0 turns a limit off."""

    __tablename__ = "retention_overrides"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    max_age_days: Mapped[float | None] = mapped_column(Float)
    keep_last: Mapped[int | None] = mapped_column(Integer)
    max_project_bytes: Mapped[int | None] = mapped_column(BigInteger)
    action: Mapped[str | None] = mapped_column(String(16))
    active_minutes: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(64))


class PinnedRun(Base):
    """A run retention never touches, by its path inside the project directory."""

    __tablename__ = "pinned_runs"
    __table_args__ = (UniqueConstraint("project_id", "run_path"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    run_path: Mapped[str] = mapped_column(String(1024))
    pinned_by: Mapped[str] = mapped_column(String(64))
    pinned_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class TrashEntry(Base):
    """One run removed by retention, and the journal of that removal.

    The state is written before each step on disk, so a rerun after a crash knows where to
    pick up (jobs/journal.py). The project is a name, not a key: trash outlives projects."""

    __tablename__ = "trash_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project: Mapped[str] = mapped_column(String(63))
    run_path: Mapped[str] = mapped_column(String(1024))
    action: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16), index=True)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    last_write: Mapped[datetime | None] = mapped_column(UTCDateTime)
    reasons: Mapped[list[str]] = mapped_column(JSON, default=list)
    archive_path: Mapped[str | None] = mapped_column(String(1024))
    actor: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    trashed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    error: Mapped[str | None] = mapped_column(Text)


class BackupRun(Base):
    """One `backup run`: which snapshot it wrote and how it ended (for `/metrics`)."""

    __tablename__ = "backup_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    target: Mapped[str] = mapped_column(String(1024))
    snapshot: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), index=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    files: Mapped[int] = mapped_column(Integer, default=0)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    transferred_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    actor: Mapped[str] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)


# -- API tokens and the run registry (issue 8) ------------------------------------------------


class TokenScope(enum.StrEnum):
    read = "read"  # what a viewer may do
    write = "write"  # also what an editor may do: register, upload, annotate, pin runs


class ApiToken(Base):
    """A bearer token. Only the SHA-256 of the secret is stored: a dump holds nothing usable."""

    __tablename__ = "api_tokens"
    __table_args__ = NEVER_REUSED

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    hint: Mapped[str] = mapped_column(String(16))  # `tbh_` + the first characters, to tell apart
    scope: Mapped[TokenScope] = mapped_column(Enum(TokenScope, native_enum=False, length=16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    created_by: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user: Mapped[User] = relationship()
    projects: Mapped[list[Project]] = relationship(secondary="api_token_projects")


class ApiTokenProject(Base):
    """The projects a token may act on; a token reaches no other project."""

    __tablename__ = "api_token_projects"

    token_id: Mapped[int] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="CASCADE"), primary_key=True
    )
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class RunStatus(enum.StrEnum):
    running = "running"
    finished = "finished"
    failed = "failed"
    killed = "killed"
    discovered = "discovered"  # found on the storage, never registered through the API


class RunSource(enum.StrEnum):
    api = "api"
    discovered = "discovered"


class RetentionState(enum.StrEnum):
    present = "present"
    trashed = "trashed"
    archived = "archived"
    purged = "purged"  # left the trash for good


class Run(Base):
    """One run: a directory under its project, and what the job told about it."""

    __tablename__ = "runs"
    __table_args__ = (
        UniqueConstraint("project_id", "path"),
        Index("ix_runs_project_created", "project_id", "created_at"),
        # The project page: a project's present runs, newest first, and their count.
        Index("ix_runs_project_present", "project_id", "retention_state", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(String(1024))  # inside the project, '/'-separated
    name: Mapped[str] = mapped_column(String(128))
    group: Mapped[str | None] = mapped_column("group_name", String(255))
    status: Mapped[RunStatus] = mapped_column(Enum(RunStatus, native_enum=False, length=16))
    source: Mapped[RunSource] = mapped_column(Enum(RunSource, native_enum=False, length=16))
    retention_state: Mapped[RetentionState] = mapped_column(
        Enum(RetentionState, native_enum=False, length=16), default=RetentionState.present
    )
    trash_entry_id: Mapped[int | None] = mapped_column(Integer)
    hparams: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    git_commit: Mapped[str | None] = mapped_column(String(64))
    git_branch: Mapped[str | None] = mapped_column(String(255))
    git_dirty: Mapped[bool | None] = mapped_column()
    dataset_version: Mapped[str | None] = mapped_column(String(255))
    command: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    notes: Mapped[str | None] = mapped_column(Text)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    first_write: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_write: Mapped[datetime | None] = mapped_column(UTCDateTime)
    bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    # Why the hparams event file (storage/hparams_file.py) could not be written; None: fine.
    hparams_file_error: Mapped[str | None] = mapped_column(String(255))
    # What the training code wrote into its event files (add_hparams, the HF Trainer's
    # `args`, Lightning), as the run-health monitor read it (storage/logged_params.py);
    # apart from what was registered with tbhub, which takes precedence for a key.
    logged_hparams: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    logged_metrics: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    project: Mapped[Project] = relationship()
    tag_rows: Mapped[list[RunTag]] = relationship(
        cascade="all, delete-orphan", order_by="RunTag.tag", lazy="selectin"
    )

    @property
    def tags(self) -> list[str]:
        return [row.tag for row in self.tag_rows]


class RunTag(Base):
    __tablename__ = "run_tags"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    tag: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


class RunParam(Base):
    """One hyperparameter (`kind` 'h') or summary metric ('m') of a run, one row per key:
    what `GET /api/v1/runs` filters and sorts on with plain indexes that serve SQLite and
    PostgreSQL alike (domain/run_params.py keeps these rows equal to the run's JSON).
    A number sits in `num`; anything else as text in `text` (booleans 'true'/'false').
    `source`: 'r' registered with tbhub, 't' written by the training code (a registered
    value wins: the row of a key both give is the registered one)."""

    __tablename__ = "run_params"
    __table_args__ = (
        Index("ix_run_params_num", "kind", "key", "num", "run_id"),
        Index("ix_run_params_text", "kind", "key", "text", "run_id"),
    )

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    kind: Mapped[str] = mapped_column(String(1), primary_key=True)
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    num: Mapped[float | None] = mapped_column(Float)
    text: Mapped[str | None] = mapped_column(String(255))
    source: Mapped[str] = mapped_column(String(1), default="r", server_default="r")


class RunEvent(Base):
    """A run's history: each status it took (`status`) and each move retention made
    (`retention`: trashed, archived, present again, purged), with who and when."""

    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_run", "run_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    kind: Mapped[str] = mapped_column(String(16))  # status | retention
    value: Mapped[str] = mapped_column(String(16))  # a RunStatus or RetentionState value
    actor: Mapped[str] = mapped_column(String(64))

    # One way only: a Run carries no collection of its events (they are read by query), so
    # a Run still merges and deletes as before; the database cascades the delete.
    run: Mapped[Run] = relationship()


# -- compare boards (issue 10) ----------------------------------------------------------------


class CompareBoard(BoardState, Base):
    """A board over runs a user picked, from any projects they can read.

    Its logdir is a view of hard links tbhub keeps outside every project
    (storage/compare_view.py); whoever opens it must be able to read every one of its runs."""

    __tablename__ = "compare_boards"
    __table_args__ = NEVER_REUSED

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # `cmp-` + 12 hex digits: the board's path /boards/<slug>/ (names.COMPARE_SLUG).
    slug: Mapped[str] = mapped_column(String(16), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    owner: Mapped[User] = relationship()
    members: Mapped[list[CompareRun]] = relationship(
        cascade="all, delete-orphan", order_by="CompareRun.position", lazy="selectin"
    )


class CompareRun(Base):
    """One run of a compare board; a run that is deleted leaves every board it was on."""

    __tablename__ = "compare_runs"

    compare_id: Mapped[int] = mapped_column(
        ForeignKey("compare_boards.id", ondelete="CASCADE"), primary_key=True
    )
    run_id: Mapped[int] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    position: Mapped[int] = mapped_column(Integer, default=0)

    run: Mapped[Run] = relationship(lazy="joined")


# -- saved views (issue 19) -----------------------------------------------------------------


class SavedView(Base):
    """A filter over a project's runs with a board of its own over exactly the runs it
    matches (domain/views.py). The board is a compare board (`board`) whose view of hard
    links follows the registry: the supervisor re-reads the runs the filter matches."""

    __tablename__ = "saved_views"
    __table_args__ = (UniqueConstraint("project_id", "name"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            index=True)  # fmt: skip
    name: Mapped[str] = mapped_column(String(64))
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    shared: Mapped[bool] = mapped_column(Boolean, default=False)
    # "recent" for the project's default view (recent, running and pinned runs); else null.
    preset: Mapped[str | None] = mapped_column(String(16))
    # The filter as domain/views.ViewFilter writes it (validated on the way in).
    filter: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    compare_id: Mapped[int] = mapped_column(
        ForeignKey("compare_boards.id", ondelete="CASCADE"), unique=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    project: Mapped[Project] = relationship()
    owner: Mapped[User] = relationship()
    board: Mapped[CompareBoard] = relationship(lazy="joined")


# -- run health (issue 17: health/) -------------------------------------------------------------


class AlertRule(Base):
    """A project's setting for one detector (health/rules.py). Absent, or a field left
    null, is the detector's default; a row exists only where an owner changed something."""

    __tablename__ = "alert_rules"
    __table_args__ = (UniqueConstraint("project_id", "detector"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    detector: Mapped[str] = mapped_column(String(16))  # nan | divergence | ... (rules.DETECTORS)
    enabled: Mapped[bool | None] = mapped_column(Boolean)
    tag_regex: Mapped[str | None] = mapped_column(String(255))
    threshold: Mapped[float | None] = mapped_column(Float)
    window: Mapped[int | None] = mapped_column(Integer)
    histograms: Mapped[bool | None] = mapped_column(Boolean)  # nan: look into histograms too
    updated_by: Mapped[str] = mapped_column(String(64))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Incident(Base):
    """One detection on one run (and tag), from its first sighting to its resolution.

    A detection that matches an open incident (same run, detector and tag) counts as a
    repeat: `count` and `last_seen`/`last_step` move, nothing new is sent. `value` holds a
    finite number only (SQLite has no NaN); `value_text` says what was seen ("nan", "-inf",
    "12.5"). `run_path` stays readable after the run's row is gone."""

    __tablename__ = "incidents"
    __table_args__ = (
        Index("ix_incidents_project", "project_id", "id"),
        Index("ix_incidents_run", "run_id", "detector", "tag"),
        Index("ix_incidents_open", "resolved_at", "project_id"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    run_id: Mapped[int | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    run_path: Mapped[str] = mapped_column(String(1024))
    tag: Mapped[str | None] = mapped_column(String(255))  # None: about the run (stalled ...)
    detector: Mapped[str] = mapped_column(String(16))
    severity: Mapped[str] = mapped_column(String(8))  # error | warning | info
    step: Mapped[int | None] = mapped_column(BigInteger)  # where it was first seen
    last_step: Mapped[int | None] = mapped_column(BigInteger)
    wall_time: Mapped[datetime | None] = mapped_column(UTCDateTime)  # the writer's, if any
    value: Mapped[float | None] = mapped_column(Float)
    value_text: Mapped[str | None] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(String(1024))
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    count: Mapped[int] = mapped_column(Integer, default=1)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    resolved_by: Mapped[str | None] = mapped_column(String(64))  # a user, or "monitor"


# -- notifications (health/notify) --------------------------------------------------------------


class NotificationChannel(Base):
    """Where a project's incidents go: a signed webhook, a Slack-format incoming webhook or
    a list of email addresses. `url` (a Slack URL is itself a credential) and `secret` are
    never shown again once saved; `last_error` is where owners see a delivery that failed
    for good."""

    __tablename__ = "notification_channels"
    __table_args__ = (UniqueConstraint("project_id", "name"), NEVER_REUSED)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            index=True)  # fmt: skip
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # webhook | slack | email
    url: Mapped[str | None] = mapped_column(String(2048))
    secret: Mapped[str | None] = mapped_column(String(255))  # the webhook's HMAC key
    recipients: Mapped[list[str]] = mapped_column(JSON, default=list)  # email addresses
    detectors: Mapped[list[str]] = mapped_column(JSON, default=list)  # empty: every kind
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class EmailPreference(Base):
    """One user's email from one project: which incident kinds (empty: all), or only for
    the runs they registered. Checked against their access when each incident comes."""

    __tablename__ = "email_preferences"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)  # fmt: skip
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"),
                                            primary_key=True, index=True)  # fmt: skip
    address: Mapped[str] = mapped_column(String(255))
    detectors: Mapped[list[str]] = mapped_column(JSON, default=list)
    own_runs_only: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Delivery(Base):
    """One incident on its way to one channel or one user: the outbox. The worker on the
    leader sends what is due, folds what one target got within a minute into a digest, and
    retries with backoff; the row outlives a restart, so nothing pending is lost."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        Index("ix_deliveries_due", "state", "next_attempt_at"),
        Index("ix_deliveries_channel", "channel_id", "id"),
        NEVER_REUSED,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    channel_id: Mapped[int | None] = mapped_column(
        ForeignKey("notification_channels.id", ondelete="CASCADE")
    )
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), index=True
    )
    incident_id: Mapped[int | None] = mapped_column(Integer)  # None: a test message
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)  # the incident then
    state: Mapped[str] = mapped_column(String(16), default="pending")  # see notify/outbox.py
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_error: Mapped[str | None] = mapped_column(Text)
