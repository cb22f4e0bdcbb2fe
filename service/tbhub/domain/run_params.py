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
from typing import Any, TypeVar, Unpack

from sqlalchemy import ColumnElement, Select, delete, false, select
from sqlalchemy.orm import Session, aliased

from tbhub.core.errors import InvalidInput
from tbhub.core.models import Project, RetentionState, Run, RunParam

AnySelect = TypeVar("AnySelect", bound=Select[Unpack[tuple[Any, ...]]])
KINDS = {"hparam": "h", "metric": "m"}
TEXT_MAX = 255
KEY_MAX = 128
MAX_FILTERS = 8
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
    """Make the run's rows equal to its hyperparameters and metrics (run flushed first)."""
    session.flush()
    session.execute(delete(RunParam).where(RunParam.run_id == run.id))
    for kind, values in (("h", run.hparams), ("m", run.metrics)):
        for key, value in (values or {}).items():
            num, text = param_cell(value)
            session.add(RunParam(run_id=run.id, kind=kind, key=key[:KEY_MAX], num=num, text=text))


@dataclass(frozen=True)
class ParamFilter:
    kind: str  # 'h' or 'm'
    key: str
    op: str
    value: str

    def condition(self) -> ColumnElement[bool]:
        number = _number(self.value)
        if self.op in ("=", "!="):
            if number is not None:
                column, wanted = RunParam.num, number
            else:
                column, wanted = RunParam.text, self.value  # type: ignore[assignment]
            return (column == wanted) if self.op == "=" else (column != wanted)
        if number is None:
            raise InvalidInput(f"{self.op} compares numbers: {self.value!r} is not one; "
                               "use = or != for text (e.g. hparam.optimizer=adam)")  # fmt: skip
        return {"<": RunParam.num < number, "<=": RunParam.num <= number,
                ">": RunParam.num > number, ">=": RunParam.num >= number}[self.op]  # fmt: skip


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


def with_param_filters(query: AnySelect, filters: Sequence[ParamFilter]) -> AnySelect:
    for flt in filters:
        matching = select(RunParam.run_id).where(
            RunParam.kind == flt.kind, RunParam.key == flt.key, flt.condition()
        )
        query = query.where(Run.id.in_(matching))
    return query


def search_runs(
    session: Session,
    *,
    project_ids: Collection[int] | None,
    filters: Sequence[ParamFilter],
    sort: ParamSort,
    offset: int,
    limit: int,
    include_removed: bool = False,
) -> tuple[list[tuple[Run, str]], int | None]:
    """The runs of `project_ids` (None: every project) that pass every filter, in the order
    asked for (runs without the sort key last, then newest first), one page at a time; with
    the offset of the next page, or None at the end."""
    query = select(Run, Project.name).join(Project, Project.id == Run.project_id)
    if project_ids is not None:
        query = query.where(Run.project_id.in_(sorted(project_ids)) if project_ids else false())
    if not include_removed:
        query = query.where(Run.retention_state == RetentionState.present)
    query = with_param_filters(query, filters)
    then = Run.id.desc() if sort.descending else Run.id.asc()
    if sort.field in PLAIN_SORTS:
        column = PLAIN_SORTS[sort.field]
        first = column.desc() if sort.descending else column.asc()
        order = [then] if column is Run.id else [first.nulls_last(), then]
    else:
        kind, _, key = sort.field.partition(".")
        by = aliased(RunParam)
        query = query.outerjoin(
            by, (by.run_id == Run.id) & (by.kind == KINDS[kind]) & (by.key == key)
        )
        order = [
            (c.desc() if sort.descending else c.asc()).nulls_last() for c in (by.num, by.text)
        ] + [then]
    found = session.execute(query.order_by(*order).offset(offset).limit(limit + 1))
    rows: list[tuple[Run, str]] = [(row[0], row[1]) for row in found]
    more = len(rows) > limit
    return rows[:limit], (offset + limit if more else None)
