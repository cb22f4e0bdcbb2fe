"""/api/v1/compare: compare boards over runs of several projects."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from tbhub.auth.caller import Caller
from tbhub.auth.permissions import AccessCache
from tbhub.core.bounds import NoControls
from tbhub.core.models import CompareBoard, RetentionState, RunStatus
from tbhub.core.timestamps import Timestamp
from tbhub.domain.compare import (
    MAX_RUNS,
    board_run_name,
    create_compare,
    delete_compare,
    get_compare,
    list_compares,
    readable,
    rename_compare,
)
from tbhub.http.deps import CallerDep, ContextDep, SessionDep
from tbhub.supervisor.plan import board_prefix

router = APIRouter(prefix="/api/v1", tags=["compare"])

CompareName = Annotated[str, Field(min_length=1, max_length=128), NoControls]
RunRefText = Annotated[str, Field(min_length=3, max_length=84, examples=["vision/12"])]
Slug = Annotated[str, Path(min_length=1, max_length=16, examples=["cmp-0123456789ab"])]


class CompareCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runs: list[RunRefText] = Field(
        min_length=1,
        max_length=MAX_RUNS,
        description="Runs as PROJECT/RUN_ID, from any projects you can read",
    )
    name: CompareName | None = Field(default=None, description="A name to find it by")


class ComparePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: CompareName | None = Field(description="The new name; null removes it")


class CompareRunOut(BaseModel):
    ref: str = Field(description="PROJECT/RUN_ID")
    project: str
    id: int
    name: str
    path: str
    status: RunStatus
    retention_state: RetentionState
    board_run: str = Field(description="The run's name on the compare board: PROJECT/PATH")


class CompareBoardState(BaseModel):
    desired_state: str
    observed_state: str
    last_access_at: Timestamp | None
    error: str | None

    @classmethod
    def of(cls, board: CompareBoard) -> CompareBoardState:
        return cls(
            desired_state=board.desired_state,
            observed_state=board.observed_state,
            last_access_at=board.last_access_at,
            error=board.last_error if board.observed_state == "failed" else None,
        )


class CompareOut(BaseModel):
    slug: str
    name: str | None
    owner: str
    board_url: str = Field(description="The compare board, served like a project's board")
    readable: bool = Field(
        description="Whether you may read every run (and so open the board); when false, "
        "`runs` is empty: you lost access to one of their projects"
    )
    run_count: int
    runs: list[CompareRunOut]
    board: CompareBoardState
    created_at: Timestamp
    updated_at: Timestamp

    @classmethod
    def of(cls, board: CompareBoard, *, visible: bool) -> CompareOut:
        runs = [
            CompareRunOut(
                ref=f"{m.run.project.name}/{m.run.id}",
                project=m.run.project.name,
                id=m.run.id,
                name=m.run.name,
                path=m.run.path,
                status=m.run.status,
                retention_state=m.run.retention_state,
                board_run=board_run_name(m.run.project.name, m.run),
            )
            for m in board.members
        ]
        return cls(
            slug=board.slug,
            name=board.name,
            owner=board.owner.name,
            board_url=board_prefix(board.slug) + "/",
            readable=visible,
            run_count=len(runs),
            runs=runs if visible else [],
            board=CompareBoardState.of(board),
            created_at=board.created_at,
            updated_at=board.updated_at,
        )


def describe(board: CompareBoard, access: AccessCache, caller: Caller) -> CompareOut:
    return CompareOut.of(board, visible=readable(access, caller, board))


@router.post("/compare", response_model=CompareOut, status_code=201)
def create(
    body: CompareCreate,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
    response: Response,
) -> CompareOut:
    """A compare board over these runs (the same runs again: the same board, 200). Open
    `board_url`; every run you cannot read is refused as not found."""
    board, made = create_compare(
        session,
        access=context.access,
        caller=caller,
        refs=body.runs,
        name=body.name,
        storage_root=context.settings.storage,
    )
    session.flush()
    if not made:
        response.status_code = 200
    return CompareOut.of(board, visible=True)


@router.get("/compare", response_model=list[CompareOut])
def list_(caller: CallerDep, context: ContextDep, session: SessionDep) -> list[CompareOut]:
    """Your compare boards, the most recent first."""
    return [describe(b, context.access, caller) for b in list_compares(session, caller=caller)]


@router.get("/compare/{slug}", response_model=CompareOut)
def read(slug: Slug, caller: CallerDep, context: ContextDep, session: SessionDep) -> CompareOut:
    """One compare board: anyone who may read all of its runs may see it and open it."""
    board = get_compare(session, access=context.access, caller=caller, slug=slug)
    return CompareOut.of(board, visible=True)


@router.patch("/compare/{slug}", response_model=CompareOut)
def rename(
    slug: Slug, body: ComparePatch, caller: CallerDep, context: ContextDep, session: SessionDep
) -> CompareOut:
    """Rename your compare board."""
    board = rename_compare(session, access=context.access, caller=caller, slug=slug,
                           name=body.name)  # fmt: skip
    return CompareOut.of(board, visible=True)


@router.delete("/compare/{slug}", status_code=204)
def delete(slug: Slug, caller: CallerDep, context: ContextDep, session: SessionDep) -> Response:
    """Delete your compare board; its board stops and its view of hard links goes."""
    delete_compare(session, access=context.access, caller=caller, slug=slug)
    context.invalidate(context.compares, after=session)
    context.wake_supervisor()
    return Response(status_code=204)
