"""Compare boards through the real nginx, in a real Chromium: runs of two projects on one
TensorBoard and never a run the reader cannot read; who may open one, re-checked when a
project is taken away; culled like any board; and no run reached through a symlink.

One `tbhub serve` for the module: projects vision, speech, lab (alice reads them) and
secret (she does not), each with runs run-00 and run-01 found by the storage watcher."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect
from sqlalchemy import select

from tbhub.core.models import Project, Role, Run
from tbhub.domain.projects import remove_membership, set_membership
from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TBHUB, TbhubServer, board_processes, wait_until
from tests.e2e.ui import check_page, screenshot, sign_in

JSON = {"Accept": "application/json"}
PROJECTS = ("vision", "speech", "lab", "secret")
# (user, projects they read)
READERS = {"alice": ("vision", "speech", "lab"), "carol": ("vision",),
           "dave": ("vision", "speech")}  # fmt: skip
IDLE_TIMEOUT = 15


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    root = tmp_path_factory.mktemp("compare")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}",
                         idle_timeout=str(IDLE_TIMEOUT))  # fmt: skip
    try:
        server.add_user("bob", "bob-password")
        for project in PROJECTS:
            write_project(server.add_project(project, owner="bob"), runs=2, steps=50, tags=1)
        for user, projects in READERS.items():
            server.add_user(user, f"{user}-password")
            with server.db() as session:
                for project in projects:
                    set_membership(session, project=project, user=user, role=Role.viewer,
                                   actor="test")  # fmt: skip
        server.start()
        wait_until(lambda: len(run_ids(server)) == 2 * len(PROJECTS), timeout=60,
                   what="the watcher to find every run")  # fmt: skip
        yield server
    finally:
        server.cleanup()


def run_ids(server: TbhubServer) -> dict[str, int]:
    """'vision/run-00' -> its run id."""
    with server.db() as session:
        rows = session.execute(select(Project.name, Run.path, Run.id).join(Project))
        return {f"{project}/{path}": run_id for project, path, run_id in rows}


def ref(server: TbhubServer, run: str) -> str:
    project = run.split("/")[0]
    return f"{project}/{run_ids(server)[run]}"


def make(client: httpx.Client, server: TbhubServer, *runs: str) -> httpx.Response:
    return client.post("/api/v1/compare", json={"runs": [ref(server, r) for r in runs]})


def board_runs(client: httpx.Client, slug: str) -> Any:
    """The runs the compare board lists through nginx, once it serves (None until then)."""
    response = client.get(f"/boards/{slug}/data/runs", headers=JSON)
    return sorted(response.json()) if response.status_code == 200 else None


def test_two_runs_of_two_projects_on_one_board_and_never_a_run_she_cannot_read(
    server: TbhubServer, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "alice", "alice-password", next_path="/compare")
        expect(page.get_by_role("heading", name="Compare runs")).to_be_visible()
        expect(page.get_by_text("tick them on a project's page")).to_be_visible()
        check_page(page, "compare-empty")

        # A run of a project she cannot read is refused like one that does not exist.
        refused = page.goto(f"{server.base_url}/compare?run={ref(server, 'secret/run-00')}")
        assert refused is not None and refused.status == 404
        expect(page.get_by_role("alert")).to_contain_text("no project named 'secret'")
        check_page(page, "compare-refused")

        # The project page's checkboxes submit the selection in /compare's query shape.
        page.goto(f"{server.base_url}/projects/vision")
        page.get_by_label("Compare run-00").check()
        page.get_by_label("Compare run-01").check()
        page.get_by_role("button", name="Compare selected runs").click()
        page.wait_for_url(f"{server.base_url}/compare?*")
        ticked = page.locator("input[name=run]:checked")
        expect(ticked).to_have_count(2)
        assert sorted(ticked.evaluate_all("boxes => boxes.map(b => b.value)")) == sorted(
            ref(server, r) for r in ("vision/run-00", "vision/run-01")
        )

        picked = ["vision/run-00", "speech/run-00", "vision/run-01"]
        query = "&".join(f"run={ref(server, r)}" for r in picked)
        page.goto(f"{server.base_url}/compare?{query}")
        check_page(page, "compare-pick")
        # Leave vision/run-01 out, name the selection, open the board.
        page.get_by_label(ref(server, "vision/run-01"), exact=True).uncheck()
        page.get_by_label("Name (optional)").fill("baseline vs speech")
        page.get_by_role("button", name="Open compare board").click()
        page.wait_for_url(f"{server.base_url}/boards/cmp-*/**", timeout=10_000)
        slug = page.url.split("/boards/")[1].split("/")[0]
        # The starting page reloads itself until TensorBoard answers, through nginx.
        page.wait_for_selector("tb-webapp", timeout=60_000, state="attached")
        for run in ("vision/run-00", "speech/run-00"):
            page.wait_for_selector(f"text={run}", timeout=30_000)
        page.wait_for_selector("text=metric/0", timeout=30_000)  # the scalar card
        assert page.get_by_text("vision/run-01").count() == 0, "unticked"
        assert page.get_by_text("secret/").count() == 0
        screenshot(page, "compare-board", full_page=False)
        tags = page.request.get(f"{server.base_url}/boards/{slug}/data/plugin/scalars/tags")
        assert tags.status == 200 and sorted(tags.json()) == ["speech/run-00", "vision/run-00"]
        scalars = page.request.get(
            f"{server.base_url}/boards/{slug}/data/plugin/scalars/scalars",
            params={"run": "speech/run-00", "tag": "metric/0"},
        )
        assert scalars.status == 200 and len(scalars.json()) == 50

        page.goto(f"{server.base_url}/compare")
        row = page.get_by_role("row").filter(has_text="baseline vs speech")
        expect(row).to_contain_text(slug)
        expect(row.get_by_role("link", name="Open board")).to_have_attribute(
            "href", f"/boards/{slug}/"
        )
        check_page(page, "compare-list")

        page.set_viewport_size({"width": 360, "height": 740})
        page.goto(f"{server.base_url}/compare?{query}")
        overflow = page.evaluate("() => document.documentElement.scrollWidth - innerWidth")
        assert overflow <= 0, f"the page is {overflow}px wider than a phone"
        check_page(page, "compare-pick-phone")
    finally:
        context.close()


def test_the_api_refuses_an_unreadable_run_and_a_partial_reader_cannot_open_the_board(
    server: TbhubServer, browser: Browser
) -> None:
    alice = server.sign_in("alice", "alice-password")
    refused = make(alice, server, "vision/run-00", "secret/run-01")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    made = make(alice, server, "vision/run-01", "speech/run-01")
    assert made.status_code == 201, made.text
    slug = made.json()["slug"]
    runs = wait_until(lambda: board_runs(alice, slug), timeout=60, what="alice's compare board")
    assert runs == ["speech/run-01", "vision/run-01"]

    carol = server.sign_in("carol", "carol-password")  # reads vision, not speech
    answer = carol.get(f"/boards/{slug}/data/runs", headers=JSON)
    assert answer.status_code == 404 and "no compare board" in answer.json()["error"]["message"]
    assert carol.get(f"/api/v1/compare/{slug}").status_code == 404
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "carol", "carol-password")
        response = page.goto(f"{server.base_url}/boards/{slug}/")
        assert response is not None and response.status == 404
        expect(page.get_by_text("no compare board")).to_be_visible()
        check_page(page, "compare-board-refused")
    finally:
        context.close()


def test_a_reader_who_loses_one_project_can_no_longer_open_the_board(
    server: TbhubServer,
) -> None:
    dave = server.sign_in("dave", "dave-password")
    slug = make(dave, server, "vision/run-00", "speech/run-01").json()["slug"]
    wait_until(lambda: board_runs(dave, slug), timeout=60, what="dave's compare board")
    with server.db() as session:
        remove_membership(session, project="speech", user="dave", actor="test")
    # The permission cache (10 s) and nginx's cached answers (a few s), with room.
    wait_until(lambda: dave.get(f"/boards/{slug}/data/runs", headers=JSON).status_code == 404,
               timeout=30, what="the board to close to dave")  # fmt: skip
    listed = {b["slug"]: b for b in dave.get("/api/v1/compare").json()}
    assert listed[slug]["readable"] is False and listed[slug]["runs"] == []


def test_an_unread_compare_board_is_culled_and_its_view_removed(server: TbhubServer) -> None:
    alice = server.sign_in("alice", "alice-password")
    slug = make(alice, server, "lab/run-00", "vision/run-00").json()["slug"]
    wait_until(lambda: board_runs(alice, slug), timeout=60, what="the compare board")
    view = server.storage / ".tbhub-compare" / slug
    linked = view / "lab" / "run-00"
    assert [p.name.split(".")[:3] for p in linked.iterdir()] == [["events", "out", "tfevents"]]
    assert board_processes(server.board_state_dir, instance=slug)

    def culled() -> bool:
        state = alice.get(f"/api/v1/compare/{slug}").json()["board"]
        running = board_processes(server.board_state_dir, instance=slug)
        return state["desired_state"] == state["observed_state"] == "stopped" and not running

    wait_until(culled, timeout=IDLE_TIMEOUT + 45, what="the idle compare board to stop")
    wait_until(lambda: not view.exists(), timeout=15, what="its view to be removed")


def test_a_run_reached_through_a_symlink_is_refused(server: TbhubServer, tmp_path: Path) -> None:
    alice = server.sign_in("alice", "alice-password")
    slug = make(alice, server, "lab/run-01", "vision/run-01").json()["slug"]
    wait_until(lambda: board_runs(alice, slug), timeout=60, what="the compare board")

    outside = tmp_path / "outside-the-storage"
    write_project(outside, runs=1, steps=5, tags=1)
    run_dir = server.storage / "lab" / "run-01"
    run_dir.rename(tmp_path / "moved-away")
    run_dir.symlink_to(outside / "run-00")

    refused = make(alice, server, "lab/run-01")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "unsafe_path"

    def board_refused() -> dict[str, Any] | None:
        state = alice.get(f"/api/v1/compare/{slug}").json()["board"]
        return state if state["observed_state"] == "failed" else None

    state = wait_until(board_refused, timeout=45, what="the board to refuse the symlinked run")
    assert "symlink" in json.dumps(state)
    assert alice.get(f"/boards/{slug}/data/runs", headers=JSON).status_code != 200


def test_tbhub_compare_prints_the_board_address_and_refuses_a_run_it_cannot_read(
    server: TbhubServer,
) -> None:
    token = server.add_token("alice", ["vision", "speech"], scope="read")
    env = {k: v for k, v in server.env.items() if not k.startswith("TBHUB_")}
    env |= {"TBHUB_URL": server.base_url, "TBHUB_TOKEN": token}

    def tbhub(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([TBHUB, "compare", *args, "--json"], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    made = tbhub(ref(server, "speech/run-00"), ref(server, "vision/run-01"), "--name", "cli")
    assert made.returncode == 0, made.stderr
    board = json.loads(made.stdout)
    assert board["board_url"] == f"{server.base_url}/boards/{board['slug']}/"
    assert [r["board_run"] for r in board["runs"]] == ["speech/run-00", "vision/run-01"]
    reader = server.token_client(token)
    runs = wait_until(lambda: board_runs(reader, board["slug"]), timeout=60,
                      what="the board the CLI made, read with the token")  # fmt: skip
    assert runs == ["speech/run-00", "vision/run-01"]

    refused = tbhub(ref(server, "vision/run-00"), ref(server, "secret/run-00"))
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["code"] == "not_found"
