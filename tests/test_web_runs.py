"""The project page (runs table: filters, sorting, paging, pins), the run page (lineage,
history), the state endpoint and the board links, in-process on both databases."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Project, Run, RunSource, RunStatus, RunTag
from tbhub.core.settings import Settings
from tbhub.domain.run_params import sync_params
from tbhub.web.runs import TableQuery, board_filter_links
from tests.test_api import seed, sign_in

HTML = {"Accept": "text/html"}
PAYLOAD = "<script>alert(1)</script>"
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def names_on(page: str) -> list[str]:
    """The run names in the runs table, top to bottom."""
    found = re.findall(r'<th scope="row" class="path"><a href="[^"]*">([^<]*)</a>', page)
    return [html.unescape(name) for name in found]


def add_run(factory: sessionmaker[Session], project: str, name: str, **fields: object) -> int:
    with transaction(factory) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == project))
        tags = fields.pop("tags", [])
        run = Run(project_id=project_id, path=fields.pop("path", name), name=name,
                  status=fields.pop("status", RunStatus.finished), source=RunSource.api,
                  hparams=fields.pop("hparams", {}), metrics=fields.pop("metrics", {}),
                  created_by="bob", tag_rows=[RunTag(tag=t) for t in tags],  # type: ignore[attr-defined]
                  **fields)  # fmt: skip
        session.add(run)
        sync_params(session, run)  # as the registry keeps them, for the conditions below
        return run.id


@pytest.fixture
def runs(factory: sessionmaker[Session], settings: Settings) -> dict[str, int]:
    seed(factory, settings)
    return {
        "alpha": add_run(factory, "vision", "alpha", group="sweep", tags=["best"], bytes=300,
                         status=RunStatus.running, last_write=T0, notes="the good one",
                         hparams={"lr": 0.1}, metrics={"acc": 0.91}),
        "beta": add_run(factory, "vision", "beta", group="sweep", bytes=100,
                        last_write=T0 + timedelta(hours=1), hparams={"lr": 0.01}),
        "gamma": add_run(factory, "vision", "gamma", bytes=200, status=RunStatus.failed),
        "evil": add_run(factory, "vision", PAYLOAD, path="evil", notes=PAYLOAD,
                        hparams={PAYLOAD: PAYLOAD}),
        "elsewhere": add_run(factory, "speech", "elsewhere"),
    }  # fmt: skip


def test_filters_narrow_the_runs_table(client: TestClient, runs: dict[str, int]) -> None:
    sign_in(client, "alice")
    get = lambda **q: names_on(client.get("/projects/vision", params=q, headers=HTML).text)  # noqa: E731
    assert get(status="running") == ["alpha"]
    assert get(tag="best") == ["alpha"]
    assert sorted(get(group="sweep")) == ["alpha", "beta"]
    assert get(q="GOOD ONE") == ["alpha"]
    assert get(status="failed", group="sweep") == []
    assert "elsewhere" not in get()
    page = client.get("/projects/vision", headers=HTML).text
    assert '<option value="best">' in page and '<option value="sweep">' in page  # suggested
    bad = client.get("/projects/vision", params={"status": "sleeping"}, headers=HTML)
    assert bad.status_code == 422 and "not one of" in bad.text


def test_hyperparameter_and_metric_conditions_narrow_the_runs_table(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "alice")
    get = lambda where: client.get("/projects/vision", params={"where": where}, headers=HTML)  # noqa: E731
    assert names_on(get("hparam.lr=0.1").text) == ["alpha"]
    assert sorted(names_on(get("hparam.lr<=0.1").text)) == ["alpha", "beta"]
    assert names_on(get("hparam.lr<=0.1 metric.acc>0.9").text) == ["alpha"]
    page = get("hparam.lr=0.01").text
    assert 'value="hparam.lr=0.01"' in page and "where=hparam.lr%3D0.01" in page  # kept
    bad = get("hparam.lr~0.1")
    assert bad.status_code == 422 and "hparam.KEY or metric.KEY" in html.unescape(bad.text)


def test_sorting_and_paging(
    client: TestClient, runs: dict[str, int], factory: sessionmaker[Session]
) -> None:
    sign_in(client, "alice")
    get = lambda **q: names_on(client.get("/projects/vision", params=q, headers=HTML).text)  # noqa: E731
    assert get() == [PAYLOAD, "gamma", "beta", "alpha"]  # newest first
    assert get(sort="size", order="desc")[:3] == ["alpha", "gamma", "beta"]
    assert get(sort="last_write", order="desc")[:2] == ["beta", "alpha"]  # no write: last
    assert get(sort="last_write", order="asc")[:2] == ["alpha", "beta"]
    for i in range(60):
        add_run(factory, "vision", f"bulk-{i:02d}")
    first, second = get(), get(page=2)
    assert len(first) == 50 and len(second) == 14 and not set(first) & set(second)
    page = client.get("/projects/vision", params={"page": 2, "tag": ""}, headers=HTML).text
    assert "Page 2 of 2" in page and 'rel="prev"' in page and 'rel="next"' not in page


def test_user_chosen_names_are_escaped_on_both_pages(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "alice")
    pages = [
        client.get("/projects/vision", headers=HTML).text,
        client.get(f"/projects/vision/runs/{runs['evil']}", headers=HTML).text,
        client.get("/projects/vision", params={"q": PAYLOAD}, headers=HTML).text,
    ]
    for page in pages:
        assert PAYLOAD not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_run_page_shows_lineage_and_the_status_history(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "bob")  # editor of vision
    made = client.post("/api/v1/projects/vision/runs", json={
        "name": "tracked", "git_commit": "0123abcd", "git_branch": "main", "git_dirty": False,
        "dataset_version": "v7", "command": "python train.py", "host": "node-3",
        "hparams": {"lr": 0.25}})  # fmt: skip
    run = made.json()
    client.patch(f"/api/v1/projects/vision/runs/{run['id']}", json={"notes": "no status change"})
    client.patch(f"/api/v1/projects/vision/runs/{run['id']}", json={"status": "finished"})
    client.delete(f"/api/v1/projects/vision/runs/{run['id']}")
    page = client.get(f"/projects/vision/runs/{run['id']}", headers=HTML).text
    for text in ("0123abcd", "main", "(clean)", "v7", "python train.py", "node-3", "0.25"):
        assert text in page, text
    history = re.findall(r'<span class="badge state-(\w+)">', page.split("Status history")[1])
    assert history[:3] == ["trashed", "finished", "running"]  # newest first, one per change
    assert page.split("Status history")[1].count("by bob") == 3


def test_the_run_page_links_each_file_to_its_download_with_its_size(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "bob")
    run = client.post("/api/v1/projects/vision/runs", json={"name": "files"}).json()
    logdir = Path(run["logdir"])
    (logdir / "ckpt").mkdir()
    (logdir / "ckpt" / "model 1.pt").write_bytes(b"w" * 3 * 1024 * 1024)
    (logdir / "hparams.yaml").write_text("lr: 0.1\n")
    page = client.get(f"/projects/vision/runs/{run['id']}", headers=HTML).text
    base = f"/api/v1/projects/vision/runs/{run['id']}/contents/"
    links = dict(re.findall(r'<a href="([^"]+)" download><code>([^<]+)</code></a>', page))
    assert links == {f"{base}ckpt/model%201.pt": "ckpt/model 1.pt",
                     f"{base}hparams.yaml": "hparams.yaml"}  # fmt: skip
    assert "3.0 MiB" in page and "8 B" in page
    for href in links:
        got = client.get(href)
        assert got.status_code == 200 and got.content[:1] in (b"w", b"l"), href


def test_viewers_see_no_pin_buttons_and_cannot_pin(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "eve")
    assert client.get("/projects/vision", headers=HTML).status_code == 404  # not a member
    sign_in(client, "bob")  # viewer of speech
    page = client.get("/projects/speech", headers=HTML).text
    assert "elsewhere" in names_on(page) and "Pin elsewhere" not in page
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    refused = client.post(f"/projects/speech/runs/{runs['elsewhere']}/pin",
                          data={"csrf_token": token, "next": ""})  # fmt: skip
    assert refused.status_code == 403
    # A run of another project is not reachable through this one.
    sign_in(client, "alice")
    assert client.get(f"/projects/vision/runs/{runs['elsewhere']}").status_code == 404
    assert 'aria-label="Pin alpha"' in client.get("/projects/vision", headers=HTML).text


def test_pin_form_keeps_the_filters_and_refuses_a_foreign_next(
    client: TestClient, runs: dict[str, int]
) -> None:
    sign_in(client, "bob")
    page = client.get("/projects/vision", params={"group": "sweep"}, headers=HTML).text
    token = page.split('name="csrf_token" value="')[1].split('"')[0]
    back = "/projects/vision?group=sweep"
    pinned = client.post(f"/projects/vision/runs/{runs['alpha']}/pin", follow_redirects=False,
                         data={"csrf_token": token, "next": back})  # fmt: skip
    assert pinned.headers["location"] == "/projects/vision?group=sweep&notice=run_pinned"
    assert "Unpin alpha" in client.get("/projects/vision", headers=HTML).text
    assert client.get("/api/v1/projects/vision/retention", headers=HTML).status_code == 403
    away = client.post(f"/projects/vision/runs/{runs['alpha']}/unpin", follow_redirects=False,
                       data={"csrf_token": token, "next": "//evil.example/x"})  # fmt: skip
    assert away.headers["location"] == "/projects/vision?notice=run_unpinned"
    forged = client.post(f"/projects/vision/runs/{runs['alpha']}/pin",
                         data={"csrf_token": "forged", "next": ""})  # fmt: skip
    assert forged.status_code == 403


def test_the_state_endpoint_reports_only_the_projects_own_runs(
    client: TestClient, runs: dict[str, int], factory: sessionmaker[Session]
) -> None:
    sign_in(client, "alice")
    with transaction(factory) as session:
        session.get_one(Run, runs["alpha"]).last_write = datetime.now(UTC) - timedelta(hours=2)
    answer = client.get("/api/v1/projects/vision/state",
                        params=[("run", runs["alpha"]), ("run", runs["gamma"]),
                                ("run", runs["elsewhere"])]).json()  # fmt: skip
    assert answer["board"]["state"] == "stopped"
    assert [(r["id"], r["status"], r["state"]) for r in answer["runs"]] == [
        (runs["alpha"], "running", "stalled"),
        (runs["gamma"], "failed", "failed"),
    ]


def test_board_links_filter_to_the_run_and_its_subdirectories_only() -> None:
    links = board_filter_links("vision", "abl/2026-run+1.5")
    assert links["timeseries"].startswith("/boards/vision/?runFilter=")
    assert links["timeseries"].endswith("#timeseries")
    regex = parse_qs(urlsplit(links["timeseries"]).query)["runFilter"][0]
    assert regex == r"^abl\/2026-run\+1\.5(/|$)"
    assert unquote(links["scalars"].split("regexInput=")[1]) == regex
    matches = re.compile(regex)  # TensorBoard's JavaScript reads these characters the same
    assert matches.search("abl/2026-run+1.5") and matches.search("abl/2026-run+1.5/train")
    assert not matches.search("abl/2026-run+1.50") and not matches.search("abl/2026-runx1x5")


def test_table_links_keep_filters_drop_defaults_and_restart_at_page_one() -> None:
    table = TableQuery("vision", status="running", q="lr", sort="size", order="desc", page=3)
    assert table.link(page=4) == "/projects/vision?status=running&q=lr&sort=size&page=4"
    assert table.link(tag="x") == "/projects/vision?status=running&tag=x&q=lr&sort=size"
    assert table.sort_link("size") == "/projects/vision?status=running&q=lr&sort=size&order=asc"
    assert TableQuery("vision").link() == "/projects/vision"
