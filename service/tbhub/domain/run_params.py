"""Hyperparameters and summary metrics as indexed rows (`run_params`), and the search over
them: `hparam.lr=0.1`, `metric.accuracy>=0.9`, `sort=-metric.accuracy`.

The run's JSON columns stay the record; `sync_params` rewrites the run's rows from them in
the same transaction, so a search never sees one without the other. One row per (run, kind,
key): a number in `num`, anything else as text (booleans 'true'/'false', lists and objects
as JSON), so both databases answer with plain B-tree indexes, no JSON expressions.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    delete,
    exists,
    false,
    func,
    null,
    or_,
    select,
    text,
    tuple_,
)
from sqlalchemy.orm import Session, aliased

from tbhub.core.errors import InvalidInput
from tbhub.core.models import Project, RetentionState, Run, RunParam, RunStatus
from tbhub.domain.run_cursor import SearchCursor, bad_cursor, decode_cursor

AnySelect = TypeVar("AnySelect", bound=Select[*tuple[Any, ...]])
KINDS = {"hparam": "h", "metric": "m"}
TEXT_MAX = 255
KEY_MAX = 128
MAX_FILTERS = 8
# Filters matching at most this many runs are where a search starts; past it, the runs are
# read in the order asked for and each is checked (domain/run_params.search_runs).
DRIVE_LIMIT = 2000
# kind '.' key, then the operator and the value; the key holds no operator characters.
FILTER = re.compile(r"(hparam|metric)\.([^<>=!\x00-\x1f\x7f]{1,128})(<=|>=|!=|=|<|>)(.{0,255})",
                    re.DOTALL)  # fmt: skip
PLAIN_SORTS = {"created": Run.id, "name": Run.name, "status": Run.status,
               "last_write": Run.last_write}  # fmt: skip
SYNTAX = ("write hparam.KEY or metric.KEY, an operator (=, !=, <, <=, >, >=) and a value, "
          "e.g. hparam.lr=0.1 or metric.accuracy>=0.9")  # fmt: skip


def param_cell(value: Any) -> tuple[float | None, str | None]:
    """(num, text) of one value as `run_params` keeps it."""
    if isinstance(value, bool):
        return None, "true" if value else "false"
    if isinstance(value, int | float):
        return (float(value), None) if math.isfinite(value) else (None, str(value))
    if isinstance(value, str):
        return None, value[:TEXT_MAX]
    return None, json.dumps(value, sort_keys=True)[:TEXT_MAX]


def sync_params(session: Session, run: Run) -> None:
    """Make the run's rows equal to its hyperparameters and metrics (run flushed first):
    those registered with tbhub (source 'r'), then those the training code wrote
    (`logged_hparams`, `logged_metrics`; source 't') for the keys not registered: a value
    registered with tbhub wins over the one the code wrote for the same key. A new run's
    rows are inserted by the registration itself (new_param_rows)."""
    session.flush()
    session.execute(delete(RunParam).where(RunParam.run_id == run.id))
    for row in new_param_rows(run):
        session.add(RunParam(**row))


def new_param_rows(run: Run) -> list[dict[str, Any]]:
    """The run_params rows of `run` (its id known), as column values: a key registered with
    tbhub wins over the same key written by the training code."""
    rows: list[dict[str, Any]] = []
    for kind, registered, logged in (("h", run.hparams, run.logged_hparams),
                                     ("m", run.metrics, run.logged_metrics)):  # fmt: skip
        keys: set[str] = set()
        for source, values in (("r", registered), ("t", logged)):
            for key, value in (values or {}).items():
                key = key[:KEY_MAX]
                if key in keys:
                    continue
                keys.add(key)
                num, text = param_cell(value)
                rows.append({"run_id": run.id, "kind": kind, "key": key, "num": num,
                             "text": text, "source": source})  # fmt: skip
    return rows


def effective_params(run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """(hyperparameters, metrics) of the run as searched: what the training code wrote,
    with what was registered with tbhub over it."""
    return ({**(run.logged_hparams or {}), **(run.hparams or {})},
            {**(run.logged_metrics or {}), **(run.metrics or {})})  # fmt: skip


def set_logged(
    session: Session, run: Run, hparams: dict[str, Any], metrics: dict[str, float]
) -> bool:
    """Keep what the training code wrote (storage/logged_params.py) on the run and in its
    rows; whether it changed."""
    if (run.logged_hparams or {}) == hparams and (run.logged_metrics or {}) == metrics:
        return False
    run.logged_hparams = dict(hparams)
    run.logged_metrics = dict(metrics)
    sync_params(session, run)
    return True


@dataclass(frozen=True)
class ParamFilter:
    kind: str  # 'h' or 'm'
    key: str
    op: str
    value: str

    def condition(self, table: Any = RunParam) -> ColumnElement[bool]:
        number = _number(self.value)
        if self.op in ("=", "!="):
            column = table.num if number is not None else table.text
            wanted: float | str = number if number is not None else self.value
            return (column == wanted) if self.op == "=" else (column != wanted)  # type: ignore[no-any-return]
        if number is None:
            raise InvalidInput(f"{self.op} compares numbers: {self.value!r} is not one; "
                               "use = or != for text (e.g. hparam.optimizer=adam)")  # fmt: skip
        num = table.num
        return {"<": num < number, "<=": num <= number,  # type: ignore[no-any-return]
                ">": num > number, ">=": num >= number}[self.op]  # fmt: skip


@dataclass(frozen=True)
class ParamSort:
    field: str  # 'created', 'name', ... or 'hparam.KEY' / 'metric.KEY'
    descending: bool


def _number(text: str) -> float | None:
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def parse_filters(expressions: Sequence[str]) -> list[ParamFilter]:
    if len(expressions) > MAX_FILTERS:
        raise InvalidInput(f"at most {MAX_FILTERS} hparam./metric. filters at once; drop some")
    found = []
    for expression in expressions:
        match = FILTER.fullmatch(expression)
        if match is None:
            raise InvalidInput(f"filter {expression[:300]!r} is not understood: {SYNTAX}")
        kind, key, op, value = match.groups()
        found.append(ParamFilter(KINDS[kind], key, op, value))
    return found


def parse_sort(text: str) -> ParamSort:
    descending = text.startswith("-")
    field = text.removeprefix("-")
    kind, dot, key = field.partition(".")
    if field in PLAIN_SORTS or (kind in KINDS and dot and 0 < len(key) <= KEY_MAX):
        return ParamSort(field, descending)
    raise InvalidInput(f"sort {text[:300]!r} is not understood: use one of "
                       f"{', '.join(PLAIN_SORTS)}, hparam.KEY or metric.KEY, with a leading '-' "
                       "for descending (e.g. sort=-metric.accuracy)")  # fmt: skip


def with_param_filters(
    query: AnySelect, filters: Sequence[ParamFilter], *, per_run: bool = False
) -> AnySelect:
    """`query` (over runs) narrowed to the runs that pass every filter."""
    return query.where(*param_conditions(Run.id, filters, per_run=per_run))


def param_conditions(
    run_id: Any, filters: Sequence[ParamFilter], *, per_run: bool
) -> list[ColumnElement[bool]]:
    """A condition on the column `run_id` for each filter: as a set of run ids the
    database may start from (few matches), or `per_run` as a check of each run it reads in
    the order asked for (many matches: the first page is found long before the set is)."""
    conditions: list[ColumnElement[bool]] = []
    for flt in filters:
        where = (RunParam.kind == flt.kind, RunParam.key == flt.key, flt.condition())
        if per_run:
            other = aliased(RunParam)
            where = (other.kind == flt.kind, other.key == flt.key, flt.condition(other))
            conditions.append(_each_run(select(other.run_id).where(other.run_id == run_id, *where)))
        else:
            conditions.append(run_id.in_(select(RunParam.run_id).where(*where)))
    return conditions


def _each_run(query: Select[Any]) -> ColumnElement[bool]:
    """Whether `query` (correlated to the row at hand) finds a row, checked for each row as
    it is read. Written as `(... LIMIT 1) IS NOT NULL`, not EXISTS: PostgreSQL turns an
    EXISTS into a join, and with its estimate of a common value far too low (it multiplies
    the chances of kind, key and value) it joins every run of both sides, then sorts, rather
    than read the sort key's index in order and stop at the page (page 20 of a search by a
    common value: 356 ms against 42 ms for 100,000 runs)."""
    return query.limit(1).scalar_subquery().is_not(None)


def _matches_many(session: Session, filters: Sequence[ParamFilter]) -> bool:
    """Whether even the narrowest filter matches more than DRIVE_LIMIT runs (each count
    stops there, on the index alone)."""
    for flt in filters:
        where = (RunParam.kind == flt.kind, RunParam.key == flt.key, flt.condition())
        capped = select(RunParam.run_id).where(*where).limit(DRIVE_LIMIT + 1).subquery()
        if int(session.scalar(select(func.count()).select_from(capped)) or 0) <= DRIVE_LIMIT:
            return False
    return True


@dataclass(frozen=True)
class SearchPage:
    """One page of a run search: its rows (run, project name), then where the next starts,
    as an offset and as a cursor; both None at the end."""

    rows: list[tuple[Run, str]]
    next_offset: int | None
    next_cursor: SearchCursor | None


def search_runs(
    session: Session,
    *,
    project_ids: Collection[int] | None,
    filters: Sequence[ParamFilter],
    sort: ParamSort,
    limit: int,
    offset: int = 0,
    cursor: SearchCursor | None = None,
    include_removed: bool = False,
) -> SearchPage:
    """The runs of `project_ids` (None: every project) that pass every filter, in the order
    asked for (runs without the sort key last, then newest first), one page at a time: from
    `offset`, or after `cursor` (a keyset page: within the cursor's segment only the rows
    after its (value, run id) in the index's order are read, so a deep page costs what the
    first does).

    The page is found as run ids first, from one table at a time in the order an index
    keeps, then its runs are read: neither database then sorts every run for one page."""
    if session.get_bind().dialect.name == "postgresql":
        # The same statement with another value can want another plan (lr=0.001 matches a
        # fifth of the runs, seed=4242 one): never a generic plan for a prepared statement.
        session.execute(text("SET LOCAL plan_cache_mode = force_custom_plan"))
    per_run = bool(filters) and _matches_many(session, filters)
    found: list[tuple[int, int, Any]] = []  # (segment, run id, sort value)
    skip, want = (0 if cursor else offset), limit + 1
    segments = _segments(project_ids, filters, sort, per_run=per_run, removed=include_removed)
    for number, segment in enumerate(segments):
        query = segment.query
        if cursor is not None:
            if number < cursor.segment:
                continue
            if number == cursor.segment:
                query = query.where(segment.after(cursor))
        rows = list(session.execute(query.offset(skip).limit(want)))
        found += [(number, int(row[0]), row[1]) for row in rows]
        want -= len(rows)
        if want == 0:
            break
        if rows or skip == 0:
            skip = 0
        else:  # the page starts past this segment: skip what it holds
            counted = select(func.count()).select_from(query.order_by(None).subquery())
            skip = max(0, skip - int(session.scalar(counted) or 0))
    more = len(found) > limit
    found = found[:limit]
    ids = [run_id for _, run_id, _ in found]
    runs = select(Run, Project.name).join(Project, Project.id == Run.project_id)
    by_id = {row[0].id: (row[0], row[1]) for row in session.execute(runs.where(Run.id.in_(ids)))}
    next_cursor = None
    if more:
        number, run_id, value = found[-1]
        value = value.value if isinstance(value, RunStatus) else value
        next_cursor = SearchCursor(_sort_text(sort), number, value, run_id)
    return SearchPage([by_id[i] for i in ids if i in by_id],
                      offset + limit if more and cursor is None else None,
                      next_cursor)  # fmt: skip


def _sort_text(sort: ParamSort) -> str:
    return f"-{sort.field}" if sort.descending else sort.field


def cursor_for(text: str, sort: ParamSort) -> SearchCursor:
    """The cursor `text` of a search sorted by `sort`, checked (domain/run_cursor.py)."""
    return decode_cursor(text, _sort_text(sort))


@dataclass(frozen=True)
class _Segment:
    """One part of the order: rows of (run id, sort value) by `value` (None: by run id
    alone), then run id, both `descending` or both not; a plain column's nulls last."""

    query: Select[*tuple[Any, ...]]
    value: Any
    run_id: Any
    descending: bool
    cast: Any = None  # the cursor's value as the column compares it; None: no value

    def after(self, cursor: SearchCursor) -> ColumnElement[bool]:
        """The rows after the cursor's in this segment's order."""
        beyond = (lambda a, b: a < b) if self.descending else (lambda a, b: a > b)
        if self.value is None:
            if cursor.value is not None:
                raise bad_cursor()
            return beyond(self.run_id, cursor.run_id)  # type: ignore[no-any-return]
        if cursor.value is None:  # a plain column's nulls, last
            return and_(self.value.is_(None), beyond(self.run_id, cursor.run_id))
        try:
            value = self.cast(cursor.value)
        except (TypeError, ValueError):
            raise bad_cursor() from None
        pair = beyond(tuple_(self.value, self.run_id), tuple_(value, cursor.run_id))
        return or_(pair, self.value.is_(None)) if self.cast in _NULLABLE else pair


def _as_number(value: Any) -> float:
    if not isinstance(value, int | float):
        raise TypeError(value)
    return float(value)


def _as_text(value: Any) -> str:
    if not isinstance(value, str) or len(value) > TEXT_MAX:
        raise TypeError(value)
    return value


def _as_time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise TypeError(value)
    return datetime.fromisoformat(value)


def _as_status(value: Any) -> RunStatus:
    return RunStatus(_as_text(value))


_NULLABLE = (_as_time,)
_PLAIN_CASTS = {"name": _as_text, "status": _as_status, "last_write": _as_time}


def _segments(
    project_ids: Collection[int] | None,
    filters: Sequence[ParamFilter],
    sort: ParamSort,
    *,
    per_run: bool,
    removed: bool,
) -> list[_Segment]:
    """The run ids of the page's order, in segments read one after the other."""
    scope: list[ColumnElement[bool]] = []
    if project_ids is not None:
        scope.append(Run.project_id.in_(sorted(project_ids)) if project_ids else false())
    if not removed:
        scope.append(Run.retention_state == RetentionState.present)
    then = Run.id.desc() if sort.descending else Run.id.asc()
    if sort.field in PLAIN_SORTS:
        column = PLAIN_SORTS[sort.field]
        where = (*scope, *param_conditions(Run.id, filters, per_run=per_run))
        if column is Run.id:
            by_id = select(Run.id, null()).where(*where).order_by(then)
            return [_Segment(by_id, None, Run.id, sort.descending)]
        first = column.desc() if sort.descending else column.asc()
        by_value = select(Run.id, column).where(*where).order_by(first.nulls_last(), then)
        return [_Segment(by_value, column, Run.id, sort.descending, _PLAIN_CASTS[sort.field])]
    # The runs with a number for the key, by it; then those with text, by it; then the runs
    # without the key, newest first. The first two read run_params alone, in the order of
    # its index (kind, key, value, run id), and check each run as they go.
    kind, _, key = sort.field.partition(".")
    by = aliased(RunParam)
    in_scope = _each_run(select(Run.id).where(Run.id == by.run_id, *scope))
    # A filter on the sort key itself bounds the index range read (metric.accuracy>=0.9).
    own = [f for f in filters if (f.kind, f.key) == (KINDS[kind], key)]
    others = [f for f in filters if f not in own]
    checks = [f.condition(by) for f in own]
    checks += param_conditions(by.run_id, others, per_run=per_run)
    # The scope is checked last: the filters are the likelier to turn a row down.
    where = (by.kind == KINDS[kind], by.key == key, *checks, in_scope)
    step = (lambda c: c.desc()) if sort.descending else (lambda c: c.asc())
    without = ~exists().where(RunParam.run_id == Run.id, RunParam.kind == KINDS[kind],
                              RunParam.key == key)  # fmt: skip
    down = sort.descending
    return [
        _Segment(select(by.run_id, by.num).where(by.num.is_not(None), *where)
                 .order_by(step(by.num), step(by.run_id)), by.num, by.run_id, down, _as_number),
        _Segment(select(by.run_id, by.text).where(by.num.is_(None), *where)
                 .order_by(step(by.text), step(by.run_id)), by.text, by.run_id, down, _as_text),
        _Segment(select(Run.id, null()).where(*scope, without,
                                              *param_conditions(Run.id, filters, per_run=per_run))
                 .order_by(Run.id.desc()), None, Run.id, True),
    ]  # fmt: skip
