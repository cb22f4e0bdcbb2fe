"""GET /api/v1/runs: search and sort runs by hyperparameter and metric, across every project
the caller can read (or the ones named with `project=`).

Conditions are written as they read, each its own query item:
`?hparam.lr=0.1&metric.accuracy>=0.9&sort=-metric.accuracy` (api/param_query.py).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from tbhub.api.param_query import param_expressions
from tbhub.api.runs import RunOut
from tbhub.auth.caller import require_project
from tbhub.auth.permissions import readable_project_ids
from tbhub.core.bounds import PROJECT_NAME_MAX
from tbhub.core.errors import InvalidInput
from tbhub.core.models import Role
from tbhub.domain.run_cursor import CURSOR_MAX
from tbhub.domain.run_params import cursor_for, parse_sort, search_runs
from tbhub.http.deps import CallerDep, ContextDep, SessionDep

router = APIRouter(prefix="/api/v1", tags=["runs"])
SORT_HELP = "created, name, status, last_write, hparam.KEY or metric.KEY; '-' first: descending"


class RunSearchPage(BaseModel):
    runs: list[RunOut]
    next_offset: int | None = Field(
        description="Pass as `offset` for the next page; null: done (or paged by cursor)"
    )
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page (as fast as the first); null: done"
    )


@router.get("/runs", response_model=RunSearchPage)
def search_all_runs(
    request: Request,
    caller: CallerDep,
    context: ContextDep,
    session: SessionDep,
    project: Annotated[
        list[Annotated[str, Query(max_length=PROJECT_NAME_MAX)]] | None,
        Query(max_length=50, description="Only these projects (repeat); default: all you read"),
    ] = None,
    sort: Annotated[
        str,
        Query(max_length=140, description=SORT_HELP),
    ] = "-created",
    include_removed: Annotated[bool, Query(description="Also trashed or archived runs")] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=100_000)] = 0,
    cursor: Annotated[
        str | None,
        Query(max_length=CURSOR_MAX, description="The last page's next_cursor"),
    ] = None,
) -> RunSearchPage:
    """Runs of the projects you can read that meet every hparam./metric. condition, sorted,
    a page at a time (pass the answer's next_cursor as `cursor`: a deep page is as fast as
    the first); runs without the sort key come last. Conditions are query items of
    their own: hparam.KEY or metric.KEY, an operator (=, !=, <, <=, >, >=) and a value, e.g.
    `hparam.lr=0.1&metric.accuracy>=0.9`; all must hold. A number compares as a number,
    anything else as text (booleans: true/false)."""
    filters = param_expressions(request)
    order = parse_sort(sort)
    if cursor is not None and offset:
        raise InvalidInput("pass cursor or offset, not both; a cursor carries its position")
    after = cursor_for(cursor, order) if cursor is not None else None
    if project:
        ids = frozenset(require_project(context.access, caller, name, Role.viewer).project_id
                        for name in project)  # fmt: skip
    else:
        grant = caller.grant
        ids = readable_project_ids(session, user_id=caller.user_id,
                                   token_projects=grant.project_ids if grant else None)  # fmt: skip
    found = search_runs(session, project_ids=ids, filters=filters, sort=order, offset=offset,
                        cursor=after, limit=limit, include_removed=include_removed)  # fmt: skip
    runs = [RunOut.of(run, name, context.settings) for run, name in found.rows]
    following = found.next_cursor.encode() if found.next_cursor else None
    return RunSearchPage(runs=runs, next_offset=found.next_offset, next_cursor=following)
