"""The runs table in a real Chromium through the real nginx: runs whose training code wrote
its hyperparameters and metrics with torch's `add_hparams` (real event files, found by the
storage watcher and read by the run-health monitor) show as columns the user picks, sort
by a metric from its header, across the projects the user reads and never another's; the
URL keeps the choice, and the page passes axe-core.

One `tbhub serve`: projects vision and speech (alice reads both), secret (she does not)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, expect

from tbhub.core.models import Role
from tbhub.domain.projects import set_membership
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.ui import check_page, signed_in

# project -> run -> (lr, accuracy) written by the training code
RUNS = {
    "vision": {"run-a": (0.1, 0.5), "run-b": (0.01, 0.9)},
    "speech": {"run-c": (0.3, 0.7)},
    "secret": {"run-d": (0.2, 0.99)},
}


def write_run(run_dir: Path, lr: float, accuracy: float) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run_dir))
    writer.add_scalar("loss", 1.0, 0)
    writer.add_hparams({"lr": lr, "optimizer": "adam"}, {"accuracy": accuracy})
    writer.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    root = tmp_path_factory.mktemp("run-table")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        server.add_user("bob", "bob-password")
        server.add_user("alice", "alice-password")
        directories = {project: server.add_project(project, owner="bob") for project in RUNS}
        with server.db() as session:
            for project in ("vision", "speech"):
                set_membership(session, project=project, user="alice", role=Role.viewer,
                               actor="test")  # fmt: skip
        server.start()
        for project, runs in RUNS.items():  # written while tbhub runs, as a training job does
            for name, (lr, accuracy) in runs.items():
                write_run(directories[project] / name, lr, accuracy)
        bob = server.sign_in("bob", "bob-password")

        def read_all() -> bool:
            runs = bob.get("/api/v1/runs", params={"limit": 50}).json()["runs"]
            return len(runs) == 4 and all(run["logged_metrics"] for run in runs)

        wait_until(read_all, timeout=90, what="the monitor to read what each run's code wrote")
        yield server
    finally:
        server.cleanup()


def test_picked_columns_sort_by_a_metric_across_her_projects(
    server: TbhubServer, browser: Browser
) -> None:
    context, page = signed_in(browser, server.base_url, "alice")
    try:
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Runs").click()
        expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
        page.get_by_label("hparam.lr").check()
        page.get_by_label("metric.accuracy").check()
        page.get_by_role("button", name="Show").click()
        page.wait_for_load_state()
        table = page.locator("#runs-table")
        expect(table.get_by_role("columnheader", name="hparam.lr")).to_be_visible()

        table.get_by_role("link", name="metric.accuracy").click()  # largest first
        page.wait_for_load_state()
        rows = table.locator("tbody tr")
        expect(rows).to_have_count(3)  # secret's run is not hers
        assert rows.evaluate_all("rows => rows.map(r => r.dataset.run)") == [
            "vision/run-b", "speech/run-c", "vision/run-a"]  # fmt: skip
        expect(rows.first.locator("td.num").first).to_have_text("0.01")
        query = parse_qs(urlsplit(page.url).query)
        assert query["column"] == ["hparam.lr", "metric.accuracy"]
        assert query["sort"] == ["-metric.accuracy"]
        header = table.get_by_role("columnheader", name="metric.accuracy")
        expect(header).to_have_attribute("aria-sort", "descending")
        check_page(page, "runs-table")

        # The URL alone gives the same table: a bookmark, or a link sent to a colleague.
        page.goto(page.url)
        expect(table.locator("tbody tr")).to_have_count(3)

        # One project, with a condition, from the same form.
        page.get_by_label("Project").select_option("vision")
        page.get_by_label("Hyperparameters and metrics").fill("hparam.lr<0.05")
        page.get_by_role("button", name="Show").click()
        page.wait_for_load_state()
        assert table.locator("tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.run)") == ["vision/run-b"]  # fmt: skip
        check_page(page, "runs-table-one-project")

        # A run page says the values came from the training code.
        table.get_by_role("link", name="run-b").click()
        page.wait_for_load_state()
        expect(page.get_by_role("row", name="lr").first).to_contain_text("training code")
        check_page(page, "run-logged-hparams")
    finally:
        context.close()
