"""The runs table (`/runs`): runs of one project or of every project the user can read, with
hyperparameters and metrics chosen as columns, filtered by hparam./metric. conditions and
sorted by any column; the search `GET /api/v1/runs` makes (domain/run_params.search_runs).
Every choice is in the URL (`?project=&where=&sort=&column=hparam.lr&column=...&page=`), so
a table can be bookmarked and shared. "Next" carries the search's cursor (`&cursor=`), so a
deep page is as fast as the first; `page` then only numbers it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from sqlalchemy import select

from tbhub.auth.caller import require_project
from tbhub.auth.permissions import readable_project_ids
from tbhub.core.bounds import PROJECT_NAME_MAX
from tbhub.core.errors import InvalidInput
from tbhub.core.models import Project, Role, Run
from tbhub.domain.run_cursor import CURSOR_MAX
from tbhub.domain.run_params import (
    KEY_MAX,
    PLAIN_SORTS,
    cursor_for,
    effective_params,
    parse_filters,
    parse_sort,
    search_runs,
)
from tbhub.http.deps import ContextDep, SessionDep
from tbhub.web.render import WebUser, caller_of, page

router = APIRouter(include_in_schema=False)

PER_PAGE = 50
MAX_PAGE = 2000  # 100,000 runs deep
MAX_COLUMNS = 12
COLUMN_MAX = len("metric.") + KEY_MAX
OFFERED_MAX = 40  # keys of the page's runs offered as columns
PLAIN_LABELS = {"name": "Run", "created": "Created", "status": "Status",
                "last_write": "Last write"}  # fmt: skip


@dataclass(frozen=True)
class RunTable:
    """The table's project, conditions, order, columns and page, as its URL carries them."""

    project: str = ""
    where: str = ""
    sort: str = "-created"
    columns: tuple[str, ...] = ()
    page: int = 1
    cursor: str = ""  # where this page starts (the last page's next cursor); "": by page

    def link(self, **changes: Any) -> str:
        """This table's URL with some values changed; a new filter or order starts at 1."""
        if "page" not in changes:
            changes["page"] = 1
        changes.setdefault("cursor", "")
        wanted = replace(self, **changes)
        params: list[tuple[str, str | int]] = []
        if wanted.project:
            params.append(("project", wanted.project))
        if wanted.where:
            params.append(("where", wanted.where))
        if wanted.sort != RunTable.sort:
            params.append(("sort", wanted.sort))
        params += [("column", column) for column in wanted.columns]
        if wanted.page != 1:
            params.append(("page", wanted.page))
        if wanted.cursor:
            params.append(("cursor", wanted.cursor))
        return f"/runs?{urlencode(params)}" if params else "/runs"

    def sort_link(self, field: str) -> str:
        """A header's link: by that field, flipping the order when it is the current one
        (numbers and times start from the largest, names from A)."""
        if self.sort.removeprefix("-") == field:
            return self.link(sort=field if self.sort.startswith("-") else f"-{field}")
        return self.link(sort=field if field == "name" else f"-{field}")

    def order_of(self, field: str) -> str | None:
        if self.sort.removeprefix("-") != field:
            return None
        return "descending" if self.sort.startswith("-") else "ascending"


def _columns(chosen: list[str]) -> tuple[str, ...]:
    """The chosen columns, checked: hparam.KEY or metric.KEY, each once, in order."""
    columns: list[str] = []
    for column in (c.strip() for c in chosen):
        if not column or column in columns:
            continue
        kind, dot, key = column.partition(".")
        if kind not in ("hparam", "metric") or not dot or not 0 < len(key) <= KEY_MAX:
            raise InvalidInput(f"column {column[:200]!r} is not understood: write hparam.KEY or "
                               "metric.KEY (e.g. hparam.lr or metric.accuracy)")  # fmt: skip
        columns.append(column)
    if len(columns) > MAX_COLUMNS:
        raise InvalidInput(f"at most {MAX_COLUMNS} columns at once; untick some")
    return tuple(columns)


def _cells(run: Run, columns: tuple[str, ...]) -> list[Any]:
    hparams, metrics = effective_params(run)
    return [
        (hparams if column.startswith("hparam.") else metrics).get(column.partition(".")[2], "")
        for column in columns
    ]


def _offered(runs: list[Run], columns: tuple[str, ...]) -> list[str]:
    """Columns to offer: the chosen ones, then the keys of this page's runs."""
    offered = list(columns)
    for run in runs:
        hparams, metrics = effective_params(run)
        for kind, values in (("hparam", hparams), ("metric", metrics)):
            for key in sorted(values):
                column = f"{kind}.{key}"
                if column not in offered and len(offered) < OFFERED_MAX:
                    offered.append(column)
    return offered


@router.get("/runs")
def runs_table(
    request: Request,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    project: Annotated[str, Query(max_length=PROJECT_NAME_MAX)] = "",
    where: Annotated[str, Query(max_length=1000)] = "",
    sort: Annotated[str, Query(max_length=COLUMN_MAX + 1)] = "-created",
    column: Annotated[
        list[Annotated[str, Query(max_length=COLUMN_MAX)]] | None,
        Query(max_length=MAX_COLUMNS * 2),
    ] = None,
    page_number: Annotated[int, Query(alias="page", ge=1, le=MAX_PAGE)] = 1,
    cursor: Annotated[str, Query(max_length=CURSOR_MAX)] = "",
) -> Response:
    caller = caller_of(user)
    readable = readable_project_ids(session, user_id=user.id, token_projects=None)
    names = sorted(session.scalars(select(Project.name).where(Project.id.in_(readable))))
    if project:
        ids = frozenset({require_project(context.access, caller, project, Role.viewer).project_id})
    else:
        ids = readable
    table = RunTable(project, where.strip(), sort.strip() or RunTable.sort, (), page_number,
                     cursor)  # fmt: skip
    error: str | None = None
    rows: list[tuple[Run, str]] = []
    next_cursor = ""
    try:
        table = replace(table, columns=_columns(column or []))
        filters = parse_filters(table.where.split())
        order = parse_sort(table.sort)
        after = cursor_for(cursor, order) if cursor else None
        found = search_runs(session, project_ids=ids, filters=filters, sort=order,
                            offset=0 if after else (table.page - 1) * PER_PAGE, cursor=after,
                            limit=PER_PAGE)  # fmt: skip
        rows = found.rows
        next_cursor = found.next_cursor.encode() if found.next_cursor else ""
    except InvalidInput as exc:
        error = str(exc)
    runs = [run for run, _ in rows]
    values = {
        "table": table,
        "projects": names,
        "rows": [(run, name, _cells(run, table.columns)) for run, name in rows],
        "offered": _offered(runs, table.columns),
        "plain_sorts": [(field, PLAIN_LABELS[field]) for field in PLAIN_SORTS],
        "next_cursor": next_cursor,
        "error": error,
    }
    return page(request, "runs_table.html", values, user=user,
                status_code=422 if error else 200)  # fmt: skip
