"""GET /api/v1/boards/<project>/bar: what tbhub's bar on a board page shows.

nginx adds static/board-bar.js to every board page (nginx/tbhub.conf.j2); the script asks
this route who is reading, where tbhub's pages are (the main origin, also from a board's own
origin), and whether the project has any run yet, so an empty board says where to write runs
instead of TensorBoard's "no dashboards" text. A share link's guest never reaches it (that
cookie is sent to the board's own path only): their 401 tells the script to show "shared
view"."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tbhub.api.board_gate import Verdict, judge_user, readable_board, viewer_session
from tbhub.auth.csrf import binding_of
from tbhub.deps import ContextDep, ProjectInPath, SessionDep
from tbhub.models import RetentionState, Run, User
from tbhub.storage.paths import project_dir

router = APIRouter(prefix="/api/v1/boards", tags=["boards"])


def runs_with_files(session: Session, project_id: int) -> int:
    """Runs of the project that hold at least one file: what a board can show."""
    return session.scalar(
        select(func.count()).select_from(Run).where(
            Run.project_id == project_id,
            Run.retention_state == RetentionState.present,
            Run.files > 0,
        )
    ) or 0  # fmt: skip


@router.get("/{project}/bar")
def board_bar(
    request: Request, project: ProjectInPath, context: ContextDep, session: SessionDep
) -> dict[str, Any]:
    """For the board page's bar: `user` (the signed-in member; null for a token, then
    `shared`), `home` (tbhub's own address), `csrf_token` (to sign out from the board page, on
    tbhub's origin only), `runs` (runs with files) and, for members, `logdir` and
    `run_command`."""
    project_id = readable_board(request, context, project)
    data = viewer_session(request, context, project)
    member = data is not None and judge_user(context, data, project)[0] is Verdict.allowed
    user = session.get(User, data.user_id) if member and data is not None else None
    binding = binding_of(request, context.cookies) if user is not None else None
    return {
        "project": project,
        "user": user.name if user is not None else None,
        "shared": user is None,
        "home": context.settings.public_url.rstrip("/"),
        "csrf_token": context.csrf.token(binding) if binding else None,
        "runs": runs_with_files(session, project_id),
        "logdir": str(project_dir(context.settings.storage, project)) if user else None,
        "run_command": f"tbhub run --project {project} -- python train.py" if user else None,
    }
