"""Searching and sorting runs by hyperparameter and metric (GET /api/v1/runs and the project
runs list), on both databases: what each role sees, the syntax, and its errors."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select

from tbhub.core.db import transaction
from tbhub.core.models import Run
from tests.api.conftest import Team

SEARCH = "/api/v1/runs"
RUNS = "/api/v1/projects/{}/runs"


def register(team: Team, project: str, who: str, name: str, hparams: dict[str, Any],
             metrics: dict[str, float] | None = None) -> int:  # fmt: skip
    response = team.client.post(RUNS.format(project), headers=team.headers(who),
                                json={"name": name, "hparams": hparams})  # fmt: skip
    assert response.status_code == 201, response.text
    run_id: int = response.json()["id"]
    if metrics:
        url = f"{RUNS.format(project)}/{run_id}"
        patched = team.client.patch(url, headers=team.headers(who), json={"metrics": metrics})
        assert patched.status_code == 200, patched.text
    return run_id


@pytest.fixture
def runs(team: Team) -> Team:
    register(team, "vision", "bob-write", "a", {"lr": 0.1, "optimizer": "adam", "amp": True},
             {"accuracy": 0.90})  # fmt: skip
    register(team, "vision", "bob-write", "b", {"lr": 0.01, "optimizer": "sgd", "amp": False},
             {"accuracy": 0.95})  # fmt: skip
    register(team, "vision", "bob-write", "c", {"lr": 0.1, "optimizer": "sgd"})
    register(team, "speech", "dave-write-speech", "s", {"lr": 0.1}, {"accuracy": 0.99})
    return team


def names(team: Team, who: str | None, query: str, path: str = SEARCH) -> list[str]:
    response = team.client.get(f"{path}?{query}", headers=team.headers(who))
    assert response.status_code == 200, response.text
    return [f"{r['project']}/{r['name']}" for r in response.json()["runs"]]


@pytest.mark.parametrize(
    ("who", "seen"),
    [
        ("alice", {"vision/a", "vision/c"}),  # owner of vision
        ("bob", {"vision/a", "vision/c"}),  # editor
        ("carol", {"vision/a", "vision/c"}),  # viewer
        ("dave", {"speech/s"}),  # editor of speech only
        ("eve", set()),  # member of nothing
        ("root", {"vision/a", "vision/c", "speech/s"}),  # instance admin
        ("bob-read", {"vision/a", "vision/c"}),  # a read token for vision
        ("root-write", {"vision/a", "vision/c"}),  # an admin's token names vision only
        ("dave-write-speech", {"speech/s"}),
    ],
)
def test_a_search_spans_exactly_the_projects_the_caller_can_read(
    runs: Team, who: str, seen: set[str]
) -> None:
    assert set(names(runs, who, "hparam.lr=0.1")) == seen


def test_a_search_needs_a_signed_in_caller(runs: Team) -> None:
    assert runs.client.get(f"{SEARCH}?hparam.lr=0.1").status_code == 401


def test_naming_a_project_the_caller_cannot_read_is_404_as_if_it_did_not_exist(
    runs: Team,
) -> None:
    response = runs.client.get(f"{SEARCH}?project=speech", headers=runs.headers("carol"))
    assert response.status_code == 404, response.text
    response = runs.client.get(f"{SEARCH}?project=speech", headers=runs.headers("bob-read"))
    assert response.status_code == 404, response.text
    # An admin's token that names vision only: speech exists for them, the token refuses it.
    response = runs.client.get(f"{SEARCH}?project=speech", headers=runs.headers("root-write"))
    assert response.status_code == 403, response.text


def test_project_narrows_a_search_to_the_named_projects(runs: Team) -> None:
    assert set(names(runs, "root", "hparam.lr=0.1&project=speech")) == {"speech/s"}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("hparam.lr=0.1", {"vision/a", "vision/c"}),
        ("hparam.lr!=0.1", {"vision/b"}),
        ("hparam.lr<0.1", {"vision/b"}),
        ("hparam.lr<=0.1", {"vision/a", "vision/b", "vision/c"}),
        ("hparam.optimizer=sgd", {"vision/b", "vision/c"}),
        ("hparam.amp=true", {"vision/a"}),
        ("metric.accuracy>=0.9", {"vision/a", "vision/b"}),
        ("metric.accuracy>0.9&hparam.optimizer=sgd", {"vision/b"}),
        ("hparam.lr=1e-1&metric.accuracy>0.5", {"vision/a"}),
        ("hparam.optimizer=%61dam", {"vision/a"}),  # percent-encoded as a browser may send it
        ("hparam.missing=1", set()),
    ],
)
def test_conditions_compare_numbers_as_numbers_and_the_rest_as_text(
    runs: Team, query: str, expected: set[str]
) -> None:
    assert set(names(runs, "carol", query)) == expected


def test_sorting_by_a_metric_puts_runs_without_it_last(runs: Team) -> None:
    assert names(runs, "root", "sort=-metric.accuracy") == [
        "speech/s", "vision/b", "vision/a", "vision/c"]  # fmt: skip
    assert names(runs, "root", "sort=metric.accuracy") == [
        "vision/a", "vision/b", "speech/s", "vision/c"]  # fmt: skip


def test_sorting_by_a_text_hyperparameter_orders_by_its_text(runs: Team) -> None:
    assert names(runs, "carol", "sort=hparam.optimizer")[0] == "vision/a"


def test_pages_follow_the_sort_order_to_the_end(runs: Team) -> None:
    seen, offset = [], 0
    while True:
        response = runs.client.get(SEARCH, headers=runs.headers("root"),
                                   params={"sort": "-metric.accuracy", "limit": 3,
                                           "offset": offset})  # fmt: skip
        body = response.json()
        seen += [r["name"] for r in body["runs"]]
        if body["next_offset"] is None:
            break
        offset = body["next_offset"]
    assert seen == ["s", "b", "a", "c"]


def test_the_project_runs_list_takes_the_same_conditions(runs: Team) -> None:
    assert set(names(runs, "carol", "metric.accuracy>=0.9", RUNS.format("vision"))) == {
        "vision/a", "vision/b"}  # fmt: skip


def test_a_metric_merged_later_is_found_by_the_search(runs: Team) -> None:
    run_id = register(runs, "vision", "bob-write", "late", {"lr": 0.5})
    assert names(runs, "carol", "metric.accuracy>0.98") == []
    url = f"{RUNS.format('vision')}/{run_id}"
    runs.client.patch(url, headers=runs.headers("bob-write"), json={"metrics": {"accuracy": 0.985}})
    assert names(runs, "carol", "metric.accuracy>0.98") == ["vision/late"]


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("hparam.lr~0.1", "is not understood"),
        ("hparam.=0.1", "is not understood"),
        ("metric.accuracy>=high", "compares numbers"),
        ("metric.accuracy", "is not understood"),
        ("sort=accuracy", "sort 'accuracy' is not understood"),
        ("sort=-hparam.", "is not understood"),
        ("&".join(f"hparam.k{i}=1" for i in range(9)), "at most 8"),
        ("hparam.lr=" + "9" * 300, "is not understood"),
        ("hparam.a=" + "1" * 5000, "longer than 4096"),
    ],
)
def test_a_malformed_condition_or_sort_is_refused_with_the_syntax(
    runs: Team, query: str, says: str
) -> None:
    for path in (SEARCH, RUNS.format("vision")):
        if path != SEARCH and query.startswith("sort="):
            continue
        response = runs.client.get(f"{path}?{query}", headers=runs.headers("carol"))
        assert response.status_code == 422, response.text
        assert says in response.json()["error"]["message"], response.text


@pytest.fixture
def many(runs: Team) -> Team:
    """Runs to page through: ties on a number and on a text, runs without the key, and a
    run whose metric is text."""
    for i in range(9):
        hparams = {"lr": [0.1, 0.2, 0.3][i % 3], "optimizer": ["adam", "sgd"][i % 2], "seed": i}
        register(
            runs, "vision", "bob-write", f"t{i}", hparams, {"accuracy": 0.5} if i % 4 else None
        )
    register(runs, "vision", "bob-write", "x", {"lr": "auto", "optimizer": "adam"})
    factory = runs.client.app.state.context.factory  # type: ignore[attr-defined]
    noon = datetime(2026, 12, 1, 12, tzinfo=UTC)
    with transaction(factory) as session:  # last writes: ties, and runs with none (last)
        for run in session.scalars(select(Run).where(Run.name.like("t%"))):
            run.last_write = noon + timedelta(minutes=run.id % 3) if run.id % 5 else None
    return runs


@pytest.mark.parametrize("sort", ["-hparam.lr", "hparam.lr", "hparam.optimizer",
                                  "-hparam.optimizer", "-metric.accuracy", "metric.accuracy",
                                  "created", "-created", "name", "-name", "status",
                                  "-last_write", "last_write"])  # fmt: skip
@pytest.mark.parametrize("where", ["", "hparam.optimizer=adam", "metric.accuracy<1"])
def test_cursor_pages_yield_exactly_the_runs_of_one_big_page_in_its_order(
    many: Team, sort: str, where: str
) -> None:
    query = f"sort={sort}" + (f"&{where}" if where else "")
    whole = many.client.get(f"{SEARCH}?{query}&limit=500", headers=many.headers("root"))
    expected = [r["id"] for r in whole.json()["runs"]]
    assert len(expected) >= 3
    for limit in (1, 2, 3):
        walked = walk_query(many, query, limit)
        assert walked == expected, limit


def walk_query(team: Team, query: str, limit: int) -> list[int]:
    seen: list[int] = []
    cursor = ""
    for _ in range(100):
        url = f"{SEARCH}?{query}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        page = team.client.get(url, headers=team.headers("root"))
        assert page.status_code == 200, page.text
        seen += [r["id"] for r in page.json()["runs"]]
        cursor = page.json()["next_cursor"] or ""
        if not cursor:
            return seen
    raise AssertionError("the pages never ended")


def test_a_cursor_page_is_the_offset_page_at_the_same_place(many: Team) -> None:
    first = many.client.get(f"{SEARCH}?sort=-hparam.lr&limit=4", headers=many.headers("root"))
    cursor = first.json()["next_cursor"]
    assert first.json()["next_offset"] == 4
    by_cursor = many.client.get(f"{SEARCH}?sort=-hparam.lr&limit=4&cursor={cursor}",
                                headers=many.headers("root"))  # fmt: skip
    by_offset = many.client.get(f"{SEARCH}?sort=-hparam.lr&limit=4&offset=4",
                                headers=many.headers("root"))  # fmt: skip
    assert [r["id"] for r in by_cursor.json()["runs"]] == [
        r["id"] for r in by_offset.json()["runs"]]  # fmt: skip


def _cursor(data: Any) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    ("sort", "cursor", "says"),
    [
        ("-hparam.lr", "not base64!", "not one this server made"),
        ("-hparam.lr", _cursor([1, 2]), "not one this server made"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 0, "v": 0.1}), "not one this server"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 7, "v": 0.1, "i": 1}), "not one"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 0, "v": "x", "i": 1}), "not one"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 1, "v": 2.0, "i": 1}), "not one"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 2, "v": 2.0, "i": 1}), "not one"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 0, "v": True, "i": 1}), "not one"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 0, "v": 1, "i": 2**70}), "not one"),
        ("-hparam.lr", _cursor({"s": "-hparam.lr", "g": 0, "v": 1, "i": "1"}), "not one"),
        ("-hparam.lr", _cursor({"s": "name", "g": 0, "v": "a", "i": 1}), "belongs to sort=name"),
        ("-last_write", _cursor({"s": "-last_write", "g": 0, "v": "noon", "i": 1}), "not one"),
        ("status", _cursor({"s": "status", "g": 0, "v": "sleeping", "i": 1}), "not one"),
        ("-created", _cursor({"s": "-created", "g": 0, "v": 3, "i": 1}), "not one"),
        ("-hparam.lr", "QUFB" * 600, "longer than 2048"),
        ("-hparam.lr", base64.urlsafe_b64encode(b"\xff\xfe").decode(), "not one this server"),
    ],
)
def test_a_bad_cursor_is_refused_with_what_to_do(
    many: Team, sort: str, cursor: str, says: str
) -> None:
    response = many.client.get(SEARCH, headers=many.headers("root"),
                               params={"sort": sort, "cursor": cursor})  # fmt: skip
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert says in message or "2048" in message, response.text


def test_a_cursor_and_an_offset_at_once_are_refused(many: Team) -> None:
    first = many.client.get(f"{SEARCH}?limit=2", headers=many.headers("root")).json()
    response = many.client.get(SEARCH, headers=many.headers("root"),
                               params={"cursor": first["next_cursor"], "offset": 2})  # fmt: skip
    assert response.status_code == 422, response.text
    assert "not both" in response.json()["error"]["message"]
