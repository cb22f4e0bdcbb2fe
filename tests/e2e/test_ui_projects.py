"""The projects, project and run pages in a real Chromium against a real `tbhub serve`
(nginx, supervisor, TensorBoard, the storage watcher): find a project, see its runs with
their status and sparkline, open a run's lineage, follow its board link to TensorBoard's own
scalar chart filtered to that run, pin and unpin, select runs to compare, watch board and
run states change without a reload, and create a project. One server for the module; each
test uses its own runs or project, so they pass in any order."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tbhub.core.models import PinnedRun, Role
from tbhub.domain.projects import set_membership
from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import wait_for_board
from tests.e2e.ui import check_page, screenshot, sign_in

pytestmark = pytest.mark.e2e
# A directory name is whatever a job chose: the watcher makes it a run, the pages escape it.
EVIL = '"><img src=x onerror=alert(1)>'
LINEAGE = {
    "group": "ablations",
    "hparams": {"lr": 0.003, "optimizer": "adam"},
    "tags": ["baseline"],
    "git_commit": "4f2a9c1d7e",
    "git_branch": "main",
    "git_dirty": True,
    "dataset_version": "imagenet-2026.1",
    "command": "python train.py --lr 0.003",
    "host": "gpu-node-7",
    "notes": "first try <b>with</b> warmup",
}
_names = count()


def write_loss(logdir: Path, steps: int = 60) -> None:
    """Event files with a `loss` curve, written by TensorBoard's own writer."""
    writer = EventFileWriter(str(logdir))
    try:
        for step in range(steps):
            value = Summary.Value(tag="loss", simple_value=math.exp(-step / 20))
            writer.add_event(Event(wall_time=1.7e9 + step, step=step,
                                   summary=Summary(value=[value])))  # fmt: skip
    finally:
        writer.close()


class Site:
    def __init__(self, server: TbhubServer, token: str) -> None:
        self.server = server
        self.api = server.token_client(token)

    def register(self, name: str, **fields: object) -> dict[str, object]:
        response = self.api.post("/api/v1/projects/vision/runs", json={"name": name, **fields})
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("ui-projects")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        server.add_user("root", "root-password", admin=True)
        server.add_user("alice", "alice-password")
        for name in ("vision", "speech", "secret"):
            server.add_project(name)
        with server.db() as session:
            for project in ("vision", "speech"):
                set_membership(session, project=project, user="alice", role=Role.editor,
                               actor="test")  # fmt: skip
        write_run(server.storage / "vision" / "baseline", steps=20)
        write_run(server.storage / "vision" / EVIL, steps=5)
        token = server.add_token("alice", ["vision"])
        server.start()
        site = Site(server, token)

        def discovered() -> bool:
            runs = site.api.get("/api/v1/projects/vision/runs").json()["runs"]
            return {run["path"] for run in runs} >= {"baseline", EVIL}

        wait_until(discovered, timeout=60, what="the watcher to find the runs written before")
        yield site
    finally:
        server.cleanup()


@pytest.fixture
def alice(site: Site, browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.on("dialog", lambda dialog: pytest.fail(f"a page ran a script: {dialog.message}"))
        sign_in(page, site.server.base_url, "alice", "alice-password")
        yield page
    finally:
        context.close()


def open_project(page: Page, base_url: str, project: str = "vision") -> None:
    page.goto(f"{base_url}/projects/{project}")
    expect(page.get_by_role("heading", level=1)).to_have_text(project)


def test_find_a_project_and_see_its_runs_with_status_and_sparkline(site: Site, alice: Page) -> None:
    run = site.register(f"resnet-{next(_names)}", **LINEAGE)
    write_loss(Path(str(run["logdir"])))
    table = alice.get_by_role("table")
    expect(table.get_by_role("link", name="secret", exact=True)).to_have_count(0)  # not hers
    check_page(alice, "projects")
    alice.get_by_label("Search projects").fill("vis")
    alice.get_by_role("button", name="Search").click()
    alice.wait_for_url(f"{site.server.base_url}/?q=vis")
    expect(table.get_by_role("link", name="speech", exact=True)).to_have_count(0)
    check_page(alice, "projects-search")
    table.get_by_role("link", name="vision", exact=True).click()

    alice.wait_for_url(f"{site.server.base_url}/projects/vision")
    row = alice.get_by_role("row").filter(has=alice.get_by_role("link", name=str(run["name"])))
    expect(row.locator(f'[data-run-state="{run["id"]}"]')).to_have_text("running")
    expect(row.get_by_text("gpu-node-7")).to_be_visible()
    expect(row.get_by_text("4f2a9c1d7e")).to_be_visible()
    sparkline = row.get_by_role(
        "img", name=f"Curve of {run['name']}: its loss, or its first scalar"
    )
    expect(sparkline).to_be_visible()
    alice.wait_for_function(
        "img => img.complete && img.naturalWidth > 0", arg=sparkline.element_handle()
    )
    svg = alice.request.get(site.server.base_url + str(sparkline.get_attribute("src"))).text()
    assert "<polyline" in svg and "<title>loss: " in svg and "at step 59" in svg
    # The run a job named with markup shows as text; no script ran (the dialog hook).
    expect(alice.get_by_role("link", name=EVIL, exact=True)).to_be_visible()
    check_page(alice, "project")


def test_open_a_run_and_see_its_lineage_and_history(site: Site, alice: Page) -> None:
    run = site.register(f"lineage-{next(_names)}", **LINEAGE)
    open_project(alice, site.server.base_url)
    alice.get_by_role("link", name=str(run["name"]), exact=True).click()
    alice.wait_for_url(f"{site.server.base_url}/projects/vision/runs/{run['id']}")
    facts = alice.locator("dl.facts")
    for text in ("4f2a9c1d7e", "main", "with uncommitted changes", "imagenet-2026.1",
                 "python train.py --lr 0.003", "gpu-node-7", "first try <b>with</b> warmup",
                 "alice", str(run["path"])):  # fmt: skip
        expect(facts).to_contain_text(text)
    expect(alice.get_by_role("row", name="lr 0.003")).to_be_visible()
    expect(alice.get_by_role("row", name="optimizer adam")).to_be_visible()
    history = alice.locator("ol.history")
    expect(history).to_contain_text("status running")
    expect(history).to_contain_text("by alice")
    check_page(alice, "run")


def test_a_runs_file_shows_its_size_and_downloads_from_the_run_page(
    site: Site, alice: Page, tmp_path: Path
) -> None:
    run = site.register(f"checkpointed-{next(_names)}")
    body = bytes(range(256)) * 10 * 1024  # 2.5 MiB
    (Path(str(run["logdir"])) / "ckpt").mkdir()
    (Path(str(run["logdir"])) / "ckpt" / "model.pt").write_bytes(body)
    alice.goto(f"{site.server.base_url}/projects/vision/runs/{run['id']}")
    row = alice.get_by_role("row", name="ckpt/model.pt")
    expect(row).to_contain_text("2.5 MiB")
    with alice.expect_download() as started:
        row.get_by_role("link", name="ckpt/model.pt").click()
    download = started.value
    assert download.suggested_filename == "model.pt"
    saved = tmp_path / "model.pt"
    download.save_as(saved)
    assert hashlib.sha256(saved.read_bytes()).digest() == hashlib.sha256(body).digest()


def test_the_board_link_shows_tensorboards_scalar_chart_of_that_run_only(
    site: Site, alice: Page
) -> None:
    run = site.register(f"charted-{next(_names)}")
    write_loss(Path(str(run["logdir"])))
    # The board lists the run first. TensorBoard's page asks for the runs once, when it
    # loads, and a board still in its first load of the logdir (a loaded host) may list
    # only some of them then: the page would not show the run until reloaded.
    board = site.server.sign_in("alice", "alice-password")
    wait_until(lambda: str(run["path"]) in wait_for_board(board, "vision").json(), timeout=60,
               what="the board to list the new run")  # fmt: skip
    alice.goto(f"{site.server.base_url}/projects/vision/runs/{run['id']}")
    alice.get_by_role("link", name="Open the board on this run").click()
    chart = alice.locator("scalar-card line-chart")
    expect(chart.first).to_be_visible(timeout=120_000)
    runs_table = alice.locator("runs-data-table")
    expect(runs_table).to_contain_text(str(run["path"]))
    expect(runs_table).not_to_contain_text("baseline")
    expect(alice.get_by_role("textbox", name="Filter runs (regex)")).to_have_value(
        f"^{str(run['path']).replace('/', chr(92) + '/')}(/|$)"
    )
    screenshot(alice, "board-filtered-to-run")  # TensorBoard's own page: not tbhub's to audit


def test_pin_and_unpin_a_run(site: Site, alice: Page) -> None:
    run = site.register(f"keeper-{next(_names)}")
    open_project(alice, site.server.base_url)
    alice.get_by_role("button", name=f"Pin {run['name']}", exact=True).click()
    expect(alice.get_by_role("status")).to_have_text("Run pinned: retention will keep it.")
    unpin = alice.get_by_role("button", name=f"Unpin {run['name']}", exact=True)
    expect(unpin).to_be_visible()
    with site.server.db() as session:
        assert session.scalar(select(PinnedRun.pinned_by).where(
            PinnedRun.run_path == run["path"])) == "alice"  # fmt: skip
    check_page(alice, "project-pinned")
    unpin.click()
    expect(alice.get_by_role("status")).to_have_text("Run unpinned.")
    expect(alice.get_by_role("button", name=f"Pin {run['name']}", exact=True)).to_be_visible()
    with site.server.db() as session:
        assert session.scalar(select(PinnedRun).where(PinnedRun.run_path == run["path"])) is None


def test_selected_runs_go_to_compare_as_project_slash_id(site: Site, alice: Page) -> None:
    first, second = site.register(f"a-{next(_names)}"), site.register(f"b-{next(_names)}")
    open_project(alice, site.server.base_url)
    for run in (first, second):
        alice.get_by_role("checkbox", name=f"Compare {run['name']}").check()
    alice.get_by_role("button", name="Compare selected runs").click()
    alice.wait_for_url("**/compare?*")
    url = urlsplit(alice.url)
    assert url.path == "/compare"
    assert sorted(parse_qs(url.query)["run"]) == sorted(
        f"vision/{run['id']}" for run in (first, second)
    )


def test_a_run_state_changes_on_the_page_without_a_reload(site: Site, alice: Page) -> None:
    run = site.register(f"live-{next(_names)}")
    open_project(alice, site.server.base_url)
    badge = alice.locator(f'[data-run-state="{run["id"]}"]')
    expect(badge).to_have_text("running")
    alice.evaluate("() => { window.loadedOnce = true; }")  # gone if the page reloads
    patched = site.api.patch(f"/api/v1/projects/vision/runs/{run['id']}",
                             json={"status": "failed"})  # fmt: skip
    assert patched.status_code == 200
    expect(badge).to_have_text("failed", timeout=20_000)
    assert "state-failed" in (badge.get_attribute("class") or "")
    assert alice.evaluate("() => window.loadedOnce === true")


def test_board_state_goes_live_on_the_page_without_a_reload(site: Site, alice: Page) -> None:
    badge = alice.locator('[data-board-state="speech"]')  # only this test opens speech's board
    expect(badge).to_have_text("stopped")
    alice.evaluate("() => { window.loadedOnce = true; }")
    cookies = {c["name"]: c["value"] for c in alice.context.cookies()}
    with httpx.Client(base_url=site.server.base_url, cookies=cookies, timeout=10) as other:
        opened = other.get("/boards/speech/", headers={"Accept": "text/html"})
        assert opened.status_code == 200 and "speech" in opened.text  # "starting" page
    expect(badge).to_have_text("live", timeout=90_000)
    assert "state-live" in (badge.get_attribute("class") or "")
    assert alice.evaluate("() => window.loadedOnce === true")


def test_an_admin_creates_a_project_from_the_page(site: Site, browser: Browser) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        sign_in(page, site.server.base_url, "root", "root-password")
        page.get_by_label("Project name").fill("fresh-project")
        page.get_by_role("button", name="Create project").click()
        page.wait_for_url(f"{site.server.base_url}/projects/fresh-project?notice=project_created")
        expect(page.get_by_role("status")).to_have_text("Project created.")
        expect(page.get_by_text("No runs yet.")).to_be_visible()
        assert (site.server.storage / "fresh-project").is_dir()
        check_page(page, "project-empty")
        page.goto(f"{site.server.base_url}/")
        page.get_by_label("Project name").fill("fresh-project")
        page.get_by_role("button", name="Create project").click()
        expect(page.get_by_role("alert")).to_contain_text("already exists")
        check_page(page, "projects-create-error")
    finally:
        context.close()
