"""/api/v1/projects/<p>/views: saved views, each a board over the runs its filter matches."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from sqlalchemy.orm import Session

from tbhub.api.compare import CompareBoardState
from tbhub.core.bounds import INT64_MAX, RUN_GROUP_MAX, TAG_MAX, NoControls
from tbhub.core.models import RunStatus, SavedView
from tbhub.core.timestamps import Timestamp
from tbhub.domain.run_params import MAX_FILTERS
from tbhub.domain.views import (
    MAX_VIEW_RUNS,
    PARAM_MAX,
    TEXT_MAX,
    VIEW_NAME_MAX,
    create_view,
    default_view,
    delete_view,
    get_view,
    list_views,
    parse_view_filter,
    view_run_ids,
)
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep
from tbhub.supervisor.plan import board_prefix

router = APIRouter(prefix="/api/v1", tags=["views"])

ViewId = Annotated[int, Path(ge=1, le=INT64_MAX)]
ViewName = Annotated[str, Field(min_length=1, max_length=VIEW_NAME_MAX), NoControls]


class ViewFilterIn(BaseModel):
    """Which runs a view shows; every field optional, all given must hold."""

    model_config = ConfigDict(extra="forbid")

    status: list[RunStatus] = Field(default_factory=list, max_length=len(RunStatus))
    tag: Annotated[str, Field(max_length=TAG_MAX)] | None = None
    group: Annotated[str, Field(max_length=RUN_GROUP_MAX)] | None = None
    q: Annotated[str, Field(max_length=TEXT_MAX)] | None = Field(
        default=None, description="Text in the run's path or notes"
    )
    since: Annotated[str, Field(max_length=40)] | None = Field(
        default=None, description="Registered at or after: ISO 8601 with a time zone"
    )
    until: Annotated[str, Field(max_length=40)] | None = Field(
        default=None, description="Registered before: ISO 8601 with a time zone"
    )
    params: list[Annotated[str, Field(max_length=PARAM_MAX)]] = Field(
        default_factory=list,
        max_length=MAX_FILTERS,
        description="hparam./metric. conditions as GET /api/v1/runs takes them, e.g. "
        "hparam.lr=0.1 or metric.accuracy>=0.9",
    )


class ViewCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: ViewName
    shared: StrictBool = Field(default=False, description="Listed to every reader of the project")
    filter: ViewFilterIn = Field(default_factory=ViewFilterIn)


class ViewOut(BaseModel):
    id: int
    project: str
    name: str
    owner: str
    shared: bool
    preset: str | None = Field(description="'recent' for the project's default view")
    filter: dict[str, object]
    runs: int = Field(description=f"Runs the view shows now (its newest {MAX_VIEW_RUNS} at most)")
    link: str = Field(description="The view's page in tbhub (a permanent link)")
    board_url: str = Field(description="The view's board, over exactly its runs")
    board: CompareBoardState
    created_at: Timestamp

    @classmethod
    def of(cls, session: Session, view: SavedView) -> ViewOut:
        board = view.board
        project = view.project.name
        return cls(
            id=view.id,
            project=project,
            name=view.name,
            owner=view.owner.name,
            shared=view.shared,
            preset=view.preset,
            filter=dict(view.filter),
            runs=len(view_run_ids(session, view)),
            link=f"/projects/{project}/views/{view.id}",
            board_url=board_prefix(board.slug) + "/",
            board=CompareBoardState.of(board),
            created_at=view.created_at,
        )


@router.get("/projects/{project}/views", response_model=list[ViewOut])
def list_project_views(
    project: ProjectInPath, caller: CallerDep, context: ContextDep, session: SessionDep
) -> list[ViewOut]:
    """The project's views you may use: the shared ones and your own, the default first."""
    views = list_views(session, access=context.access, caller=caller, project=project)
    return [ViewOut.of(session, view) for view in views]


@router.post("/projects/{project}/views", response_model=ViewOut, status_code=201)
def create_project_view(
    project: ProjectInPath,
    body: ViewCreate,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> ViewOut:
    """A new view (editors and owners): a board over the runs its filter matches, which
    follows the registry (new matching runs appear, trashed runs leave)."""
    flt = parse_view_filter(body.filter.model_dump(exclude_defaults=True, mode="json"))
    view = create_view(session, access=context.access, caller=caller, project=project,
                       name=body.name, shared=body.shared, flt=flt)  # fmt: skip
    context.invalidate(context.compares, after=session)
    return ViewOut.of(session, view)


@router.post("/projects/{project}/views/default", response_model=ViewOut)
def open_default_view(
    project: ProjectInPath, caller: CallerDep, context: ContextDep, session: SessionDep
) -> ViewOut:
    """The project's default view (its recent, running and pinned runs), made on first use."""
    view, made = default_view(session, access=context.access, caller=caller, project=project)
    if made:
        context.invalidate(context.compares, after=session)
    return ViewOut.of(session, view)


@router.get("/projects/{project}/views/{view_id}", response_model=ViewOut)
def read_view(
    project: ProjectInPath,
    view_id: ViewId,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> ViewOut:
    """One view you may use."""
    view = get_view(session, access=context.access, caller=caller, project=project,
                    view_id=view_id)  # fmt: skip
    return ViewOut.of(session, view)


@router.delete("/projects/{project}/views/{view_id}", status_code=204)
def delete_project_view(
    project: ProjectInPath,
    view_id: ViewId,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
) -> Response:
    """Delete a view (its owner, an owner of the project, an admin); its board stops."""
    delete_view(session, access=context.access, caller=caller, project=project,
                view_id=view_id)  # fmt: skip
    context.invalidate(context.compares, after=session)
    context.wake_supervisor()
    return Response(status_code=204)
