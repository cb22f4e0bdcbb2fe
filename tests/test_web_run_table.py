"""The runs table (`/runs`): chosen hyperparameter and metric columns, sorting by any of them,
conditions, one project or every project the user reads, the choice kept in the URL; values
the training code wrote count, a registered one wins. In-process, both databases."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Run
from tbhub.core.settings import Settings
from tbhub.domain.run_params import set_logged
from tbhub.web.run_table import MAX_COLUMNS, PER_PAGE, RunTable
from tests.test_api import seed, sign_in
from tests.test_web_runs import PAYLOAD, add_run

HTML = {"Accept": "text/html"}


def rows_of(page: str) -> list[list[str]]:
    """The table's rows: the run's project/path, then each chosen column's cell."""
    body = page.split('<table class="runs" id="runs-table">', 1)[1].split("</table>", 1)[0]
    rows = []
    for row in re.findall(r'<tr data-run="([^"]*)">(.*?)</tr>', body, re.DOTALL):
        cells = re.findall(r'<td class="num">([^<]*)</td>', row[1])
        rows.append([html.unescape(row[0]), *map(html.unescape, cells)])
    return rows


@pytest.fixture
def runs(factory: sessionmaker[Session], settings: Settings) -> dict[str, int]:
    seed(factory, settings)
    ids = {
        "a": add_run(factory, "vision", "a", hparams={"lr": 0.1}, metrics={"acc": 0.5}),
        "b": add_run(factory, "vision", "b", hparams={"lr": 0.01}, metrics={"acc": 0.9}),
        "c": add_run(factory, "vision", "c"),
        "s": add_run(factory, "speech", "s", hparams={"lr": 0.3}, metrics={"acc": 0.7}),
        "evil": add_run(factory, "vision", "evil", hparams={PAYLOAD: 1}),
    }
    with transaction(factory) as session:  # c's values come from its training code only
        run = session.get(Run, ids["c"])
        assert run is not None
        set_logged(session, run, {"lr": 0.2, "optimizer": "adam"}, {"acc": 0.8})
        a = session.get(Run, ids["a"])  # a's code wrote lr too: the registered 0.1 wins
        assert a is not None
        set_logged(session, a, {"lr": 9.0}, {})
    return ids


def test_chosen_columns_show_and_sort_across_the_projects_a_user_reads(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")  # reads vision (editor) and speech (viewer)
    query = {"column": ["hparam.lr", "metric.acc"], "sort": "-metric.acc"}
    page = client.get("/runs", params=query, headers=HTML)
    assert page.status_code == 200
    assert rows_of(page.text)[:4] == [
        ["vision/b", "0.01", "0.9"],
        ["vision/c", "0.2", "0.8"],
        ["speech/s", "0.3", "0.7"],
        ["vision/a", "0.1", "0.5"],
    ]
    by_lr = rows_of(client.get("/runs", params={**query, "sort": "hparam.lr"}, headers=HTML).text)
    assert [row[0] for row in by_lr][:4] == ["vision/b", "vision/a", "vision/c", "speech/s"]
    assert 'aria-sort="ascending"' in client.get("/runs", params={**query, "sort": "hparam.lr"},
                                                 headers=HTML).text  # fmt: skip


def test_one_project_and_conditions_narrow_the_table(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")
    query = {"column": ["hparam.lr"], "project": "vision", "where": "hparam.lr>=0.1"}
    found = rows_of(client.get("/runs", params=query, headers=HTML).text)
    assert sorted(row[0] for row in found) == ["vision/a", "vision/c"]  # a: registered 0.1
    found = rows_of(client.get("/runs", params={**query, "where": "hparam.optimizer=adam"},
                               headers=HTML).text)  # fmt: skip
    assert found == [["vision/c", "0.2"]]


def test_a_user_sees_only_the_projects_they_read(client: TestClient, runs: dict[str, int]) -> None:
    sign_in(client, "alice")  # vision only
    found = rows_of(client.get("/runs", params={"column": "hparam.lr"}, headers=HTML).text)
    assert "speech/s" not in [row[0] for row in found] and found
    refused = client.get("/runs", params={"project": "speech"}, headers=HTML)
    assert refused.status_code in (403, 404)
    assert "speech/s" not in refused.text


def test_the_choice_is_kept_in_the_urls_the_page_links_to(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")
    query = {"column": ["hparam.lr", "metric.acc"], "where": "metric.acc>0.1",
             "project": "vision"}  # fmt: skip
    page = client.get("/runs", params=query, headers=HTML)
    links = [html.unescape(h) for h in re.findall(r'<a class="sort" href="([^"]*)"', page.text)]
    acc = next(link for link in links if "sort=-metric.acc" in link)
    assert parse_qs(urlsplit(acc).query) == {
        "project": ["vision"], "where": ["metric.acc>0.1"], "sort": ["-metric.acc"],
        "column": ["hparam.lr", "metric.acc"]}  # fmt: skip
    table = RunTable("vision", "metric.acc>0.1", "-metric.acc", ("hparam.lr",), 2)
    assert parse_qs(urlsplit(table.sort_link("metric.acc")).query)["sort"] == ["metric.acc"]
    assert "page=" not in table.sort_link("metric.acc")  # a new order starts at page 1
    assert 'value="hparam.lr" checked' in page.text  # the picker shows the choice
    assert PAYLOAD not in page.text  # keys offered as columns are escaped


def test_bad_columns_and_conditions_say_what_to_write(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")
    for query in ({"column": "lr"}, {"where": "hparam.lr~1"}, {"sort": "size!"},
                  {"column": [f"hparam.k{i}" for i in range(MAX_COLUMNS + 1)]}):  # fmt: skip
        page = client.get("/runs", params=query, headers=HTML)
        assert page.status_code == 422, query
        assert 'role="alert"' in page.text and ("hparam.KEY" in page.text or "at most" in
                                                page.text or "operator" in page.text)  # fmt: skip


def test_signed_out_is_sent_to_sign_in(client: TestClient, runs: dict[str, int]) -> None:
    page = client.get("/runs", headers=HTML, follow_redirects=False)
    assert page.status_code in (302, 303) and "/auth/login" in page.headers["location"]


def test_runs_in_the_table_are_the_apis(
    client: TestClient, runs: dict[str, int], factory: sessionmaker[Session]
) -> None:
    sign_in(client, "bob")
    found = client.get("/api/v1/runs?metric.acc>0.6&sort=-metric.acc").json()["runs"]
    assert [(r["project"], r["path"]) for r in found] == [("vision", "b"), ("vision", "c"),
                                                          ("speech", "s")]  # fmt: skip
    c = next(r for r in found if r["path"] == "c")
    assert c["hparams"] == {} and c["logged_hparams"] == {"lr": 0.2, "optimizer": "adam"}
    assert c["logged_metrics"] == {"acc": 0.8}
    with factory() as session:
        a = session.scalar(select(Run).where(Run.id == runs["a"]))
        assert a is not None and a.logged_hparams == {"lr": 9.0}


def test_next_follows_the_searchs_cursor_to_the_same_runs_as_one_big_page(
    client: TestClient, runs: dict[str, int], factory: sessionmaker[Session]
) -> None:
    for i in range(PER_PAGE):  # ties on lr, so the run id decides within each value
        add_run(factory, "vision", f"r{i}", hparams={"lr": [0.1, 0.2][i % 2]})
    sign_in(client, "bob")
    whole = client.get("/api/v1/runs?sort=-hparam.lr&limit=500").json()["runs"]
    expected = [f"{r['project']}/{r['path']}" for r in whole]
    first = client.get("/runs", params={"sort": "-hparam.lr"}, headers=HTML)
    after = re.findall(r'<a href="([^"]*)" rel="next">Next</a>', first.text)
    assert len(after) == 1
    link = html.unescape(after[0])
    assert parse_qs(urlsplit(link).query)["page"] == ["2"] and "cursor" in link
    second = client.get(link, headers=HTML)
    assert second.status_code == 200
    assert 'rel="next"' not in second.text  # the last page
    assert "Page 2," in second.text
    seen = [row[0] for row in rows_of(first.text) + rows_of(second.text)]
    assert seen == expected and len(seen) == PER_PAGE + len(runs)


def test_a_tampered_cursor_says_to_start_again(client: TestClient, runs: dict[str, int]) -> None:
    sign_in(client, "bob")
    page = client.get("/runs", params={"sort": "-hparam.lr", "cursor": "bm90IG1pbmU"},
                      headers=HTML)  # fmt: skip
    assert page.status_code == 422
    assert 'role="alert"' in page.text and "start again from the first page" in page.text
