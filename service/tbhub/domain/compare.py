"""Compare boards: one board over runs a user picked from any projects they can read.

Keyword-only service functions the API, the web page and the CLI share. A compare board is
named by its slug, `cmp-` + 12 hex digits of a hash of its owner and its runs, so picking the
same runs again gives the same board. Every function re-checks the caller's access: a run is
named `<project>/<run id>` and one the caller cannot read is "not found", exactly like one
that does not exist. The board itself is started and culled like a project's
(supervisor/state.py) over a view of hard links (storage/compare_view.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tbhub.auth.caller import Caller, effective_role, require_project
from tbhub.auth.permissions import AccessCache
from tbhub.core.errors import AlreadyExists, Forbidden, InvalidInput, NotFound
from tbhub.core.models import (
    CompareBoard,
    CompareRun,
    RetentionState,
    Role,
    Run,
    SavedView,
    TokenScope,
)
from tbhub.domain import audit
from tbhub.storage.paths import run_dir

MAX_RUNS = 100  # TensorBoard's run selector gets hard to read long before this
RUN_REF = re.compile(r"([a-z0-9][a-z0-9-]{0,62})/([1-9][0-9]{0,17})")
EXAMPLE = "vision/12"


@dataclass(frozen=True)
class RunRef:
    """A run as people name it: `<project>/<run id>`."""

    project: str
    run_id: int

    def __str__(self) -> str:
        return f"{self.project}/{self.run_id}"


def parse_run_ref(text: str) -> RunRef:
    match = RUN_REF.fullmatch(text)
    if match is None:
        raise InvalidInput(
            f"run {text[:80]!r} is not PROJECT/RUN_ID, e.g. {EXAMPLE} (run ids are listed by "
            "`tbhub runs list -p PROJECT` and on the project's page)"
        )
    return RunRef(match[1], int(match[2]))


def compare_slug(owner_id: int, run_ids: Sequence[int]) -> str:
    raw = f"{owner_id}:{','.join(str(i) for i in sorted(set(run_ids)))}".encode()
    return "cmp-" + hashlib.sha256(raw).hexdigest()[:12]


def board_run_name(project: str, run: Run) -> str:
    """How TensorBoard names the run on a compare board (the view's layout)."""
    return f"{project}/{run.path}"


def can_read(access: AccessCache, caller: Caller, project: str) -> bool:
    return effective_role(caller, access.lookup(caller.user_id, project)) is not None


def pick_runs(
    session: Session, *, access: AccessCache, caller: Caller, refs: Sequence[str]
) -> list[tuple[RunRef, Run]]:
    """The runs named, in order and without repeats, each one the caller can read and that
    is still on the storage; NotFound for any other, as if it did not exist."""
    parsed = list(dict.fromkeys(parse_run_ref(ref) for ref in refs))
    if not parsed:
        raise InvalidInput(f"pick at least one run to compare, as PROJECT/RUN_ID (e.g. {EXAMPLE})")
    if len(parsed) > MAX_RUNS:
        raise InvalidInput(f"a compare board shows at most {MAX_RUNS} runs, not {len(parsed)}")
    picked = []
    for ref in parsed:
        project = require_project(access, caller, ref.project, Role.viewer)
        run = session.get(Run, ref.run_id)
        if run is None or run.project_id != project.project_id:
            raise NotFound(
                f"no run {ref} that you can read; the runs of {ref.project} are listed by "
                f"`tbhub runs list -p {ref.project}` and on its page"
            )
        if run.retention_state != RetentionState.present:
            raise InvalidInput(
                f"run {ref} is {run.retention_state.value}, so there is nothing to show; "
                "an operator can bring a trashed run back with `tbhub admin trash restore`"
            )
        picked.append((ref, run))
    return picked


def create_compare(
    session: Session,
    *,
    access: AccessCache,
    caller: Caller,
    refs: Sequence[str],
    name: str | None,
    storage_root: Path,
) -> tuple[CompareBoard, bool]:
    """The caller's compare board over these runs, made now or found (True: made now).

    Each run's directory must stay inside its project (no symlink out of it)."""
    picked = pick_runs(session, access=access, caller=caller, refs=refs)
    for ref, run in picked:
        run_dir(storage_root, ref.project, run.path)
    run_ids = [run.id for _, run in picked]
    slug = compare_slug(caller.user_id, run_ids)
    board = _find(session, slug)
    if board is None:
        board = CompareBoard(
            slug=slug,
            owner_id=caller.user_id,
            name=name,
            members=[CompareRun(run_id=i, position=n) for n, i in enumerate(run_ids)],
        )
        try:
            with session.begin_nested():  # the same runs picked twice at once: one board
                session.add(board)
        except IntegrityError:
            board = _find(session, slug)
            if board is None:
                raise
        else:
            audit.record(session, actor=caller.name, action="compare.create", target=slug,
                         runs=[str(ref) for ref, _ in picked])  # fmt: skip
            return board, True
    if board.owner_id != caller.user_id or sorted(m.run_id for m in board.members) != sorted(
        run_ids
    ):
        raise AlreadyExists(f"compare board {slug} already holds other runs; try again")
    if name is not None and name != board.name:
        board.name = name
        board.updated_at = datetime.now(UTC)
    return board, False


def _find(session: Session, slug: str) -> CompareBoard | None:
    return session.scalar(select(CompareBoard).where(CompareBoard.slug == slug))


def readable(access: AccessCache, caller: Caller, board: CompareBoard) -> bool:
    """Whether the caller may read every run of the board (and so open it)."""
    projects = {member.run.project.name for member in board.members}
    return bool(projects) and all(can_read(access, caller, p) for p in projects)


def get_compare(
    session: Session, *, access: AccessCache, caller: Caller, slug: str
) -> CompareBoard:
    """The compare board, if the caller may read every run it shows."""
    board = _find(session, slug)
    if board is None or not readable(access, caller, board):
        raise NotFound(
            f"no compare board {slug!r} that you can open: it takes read access to the "
            "project of every run it shows; list yours with GET /api/v1/compare"
        )
    return board


def list_compares(session: Session, *, caller: Caller, limit: int = 50) -> list[CompareBoard]:
    """The caller's own compare boards, the most recently made or renamed first (saved
    views' boards are listed with their views, domain/views.py)."""
    return list(
        session.scalars(
            select(CompareBoard)
            .where(
                CompareBoard.owner_id == caller.user_id,
                CompareBoard.id.not_in(select(SavedView.compare_id)),
            )
            .order_by(CompareBoard.updated_at.desc(), CompareBoard.id.desc())
            .limit(limit)
        )
    )


def _require_owner(caller: Caller, board: CompareBoard, what: str) -> None:
    if board.owner_id != caller.user_id and not caller.is_admin:
        raise Forbidden(f"only the owner of compare board {board.slug} (or an admin) may {what}")
    if caller.grant is not None and caller.grant.scope == TokenScope.read:
        raise Forbidden(f"a read token cannot {what}; use a write token or the web UI")


def rename_compare(
    session: Session, *, access: AccessCache, caller: Caller, slug: str, name: str | None
) -> CompareBoard:
    board = get_compare(session, access=access, caller=caller, slug=slug)
    _require_owner(caller, board, "rename it")
    board.name = name
    board.updated_at = datetime.now(UTC)
    return board


def delete_compare(session: Session, *, access: AccessCache, caller: Caller, slug: str) -> None:
    """Forget the board; the supervisor stops it and deletes its view on its next pass."""
    board = get_compare(session, access=access, caller=caller, slug=slug)
    _require_owner(caller, board, "delete it")
    session.delete(board)
    audit.record(session, actor=caller.name, action="compare.delete", target=slug)
