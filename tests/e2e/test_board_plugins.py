"""Board plugins through a real `tbhub serve` (nginx, supervisor, TensorBoard), with both local
launchers: a real PyTorch profiler trace in the board's profiler tab in Chromium, and extra
plugins installed by the real `tbhub admin plugins install` from a real wheel, turned on per
board, one of them failing on import and one on load without breaking the board; the same
in a container of the board image that command builds."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Frame, Page, expect

from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TBHUB, TbhubServer, wait_until
from tests.e2e.plugin_packages import (
    GREETING,
    IMPORT_FAILS,
    LOAD_FAILS,
    PACKAGE,
    VERSION,
    WORKS,
    build_wheel,
    write_profiler_trace,
)
from tests.e2e.test_board_page_browser import signed_in
from tests.e2e.test_boards import wait_for_board

PROFILER = "/boards/vision/data/plugin/pytorch_profiler"
LAUNCHERS = ["zygote", "exec"]


def profiler_runs(client: httpx.Client) -> list[str]:
    response = client.get(f"{PROFILER}/runs")
    return response.json().get("runs", []) if response.status_code == 200 else []  # type: ignore[no-any-return]


def board_status(client: httpx.Client) -> dict[str, Any]:
    response = client.get("/api/v1/projects/vision/board")
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def profiler_frame(page: Page) -> Frame | None:
    page.wait_for_timeout(200)  # Playwright sees new frames only while it handles events
    return next((f for f in page.frames if f.url.endswith("/pytorch_profiler/index.html")), None)


def assert_profiler_reads_the_trace(client: httpx.Client, worker: str) -> None:
    """The profiler's own routes, through nginx: the run, its views, the trace's events."""
    wait_until(lambda: profiler_runs(client) == ["train"], timeout=90,
               what="the profiler plugin to read the trace")  # fmt: skip
    views = client.get(f"{PROFILER}/views", params={"run": "train"}).json()
    assert "Trace" in views and "Overview" in views
    events = client.get(f"{PROFILER}/trace", params={"run": "train", "worker": worker,
                                                      "span": "1"}).json()  # fmt: skip
    names = {e.get("name") for e in events["traceEvents"]}
    assert "aten::linear" in names and "Optimizer.step#SGD.step" in names


def assert_profiler_tab_shows(browser: Browser, server: TbhubServer, worker: str) -> None:
    """The board's profiler tab in Chromium, through nginx, lists the run and its worker."""
    context = signed_in(browser, server)
    try:
        page = context.new_page()
        page.goto(f"{server.base_url}/boards/vision/#pytorch_profiler")
        frame = wait_until(lambda: profiler_frame(page), timeout=60,
                           what="the profiler tab's frame")  # fmt: skip
        assert isinstance(frame, Frame)
        frame.wait_for_selector("text=train", timeout=60_000)
        frame.wait_for_selector(f"text={worker}", timeout=60_000)
        assert "Overview" in frame.inner_text("body")
    finally:
        context.close()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_torch_profiler_trace_shows_in_the_profiler_tab_in_chromium(
    make_server: Callable[..., TbhubServer], browser: Browser, launcher: str
) -> None:
    server = make_server(board_launcher=launcher)
    server.add_user("alice", "alice-password")
    project = server.add_project("vision", owner="alice")
    write_run(project / "train", steps=3, tags=1)
    trace = write_profiler_trace(project / "train")
    worker = trace.name.split(".")[0]
    server.cli("admin", "board", "set", "vision", "--plugin", "pytorch_profiler")
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    assert_profiler_reads_the_trace(alice, worker)
    assert board_status(alice)["plugin_errors"] == []

    assert_profiler_tab_shows(browser, server, worker)


def registered_runs(client: httpx.Client) -> set[str]:
    response = client.get("/api/v1/projects/vision/runs")
    assert response.status_code == 200, response.text
    return {run["path"] for run in response.json()["runs"]}


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_run_of_profiler_traces_alone_is_a_run_and_its_board_shows_the_profile(
    make_server: Callable[..., TbhubServer], browser: Browser, launcher: str
) -> None:
    """No event file anywhere: the scan registers the run the trace makes, the board's
    profiler lists it through nginx and in Chromium with no "no runs" panel over it, and a
    profile written later in XProf's layout (`<run>/plugins/profile/<session>/`) becomes
    the run above `plugins` through the watcher."""
    server = make_server(board_launcher=launcher)
    server.add_user("alice", "alice-password")
    project = server.add_project("vision", owner="alice")
    worker = write_profiler_trace(project / "profiled").name.split(".")[0]
    server.cli("admin", "board", "set", "vision", "--plugin", "pytorch_profiler")
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_until(lambda: registered_runs(alice) == {"profiled"}, timeout=60,
               what="the scan to register the run of traces")  # fmt: skip
    assert "profiled" in alice.get("/projects/vision").text
    wait_until(lambda: profiler_runs(alice) == ["profiled"], timeout=120,
               what="the board's profiler to list the run")  # fmt: skip
    assert alice.get("/api/v1/boards/vision/bar").json()["runs"] == 1

    context = signed_in(browser, server)
    try:
        page = context.new_page()
        page.goto(f"{server.base_url}/boards/vision/#pytorch_profiler")
        bar = page.get_by_role("navigation", name="tbhub")
        expect(bar).to_contain_text("vision", timeout=60_000)  # the bar has asked /bar
        frame = wait_until(lambda: profiler_frame(page), timeout=60,
                           what="the profiler tab's frame")  # fmt: skip
        assert isinstance(frame, Frame)
        frame.wait_for_selector("text=profiled", timeout=60_000)
        frame.wait_for_selector(f"text={worker}", timeout=60_000)
        assert page.locator("#tbhub-empty").count() == 0
        expect(page.get_by_role("region", name="No runs in vision yet")).to_have_count(0)
    finally:
        context.close()

    session = project / "later" / "plugins" / "profile" / "2026_12_04_15_00_00"
    write_profiler_trace(session)
    wait_until(lambda: registered_runs(alice) == {"profiled", "later"}, timeout=60,
               what="the watcher to register the run above plugins/")  # fmt: skip


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_extra_plugins_load_per_board_and_broken_ones_leave_the_board_serving(
    make_server: Callable[..., TbhubServer], tmp_path: Path, launcher: str
) -> None:
    wheels = tmp_path / "wheels"
    build_wheel(wheels)
    server = make_server(board_launcher=launcher,
                         board_plugins=json.dumps([f"{PACKAGE}=={VERSION}"]))  # fmt: skip
    # pip reads the package from the wheel directory alone; the rest is installed already.
    server.env.update(PIP_FIND_LINKS=str(wheels), PIP_NO_INDEX="1")
    server.add_user("alice", "alice-password")
    write_run(server.add_project("vision", owner="alice") / "train", steps=3, tags=1)

    done = server.cli("admin", "plugins", "install", "--json", check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    installed = json.loads(done.stdout)
    assert set(installed["plugins"]) == {WORKS, IMPORT_FAILS, LOAD_FAILS}
    listed = json.loads(server.cli("admin", "plugins", "list", "--json").stdout)
    assert listed["plugins"] == installed["plugins"]
    refused = server.cli("admin", "board", "set", "vision", "--plugin", "nonesuch", check=False)
    assert refused.returncode != 0 and WORKS in refused.stderr

    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    # Off until the project turns it on.
    assert alice.get(f"/boards/vision/data/plugin/{WORKS}/hello").status_code == 404

    server.cli("admin", "board", "set", "vision", "--plugin", WORKS, "--plugin", IMPORT_FAILS,
               "--plugin", LOAD_FAILS)  # fmt: skip

    def greeting() -> str | None:
        response = alice.get(f"/boards/vision/data/plugin/{WORKS}/hello")
        return response.text if response.status_code == 200 else None

    assert wait_until(greeting, timeout=90, what="the extra plugin's route") == GREETING
    wait_for_board(alice, "vision")  # the board itself still serves its runs
    status = wait_until(lambda: (s := board_status(alice))["plugin_errors"] and s, timeout=30,
                        what="the plugin errors in the board's status")  # fmt: skip
    assert isinstance(status, dict)
    errors = {e["plugin"]: e["error"] for e in status["plugin_errors"]}
    assert set(errors) == {IMPORT_FAILS, LOAD_FAILS}
    assert "breaks on import" in errors[IMPORT_FAILS]
    assert "breaks when TensorBoard loads it" in errors[LOAD_FAILS]
    listing = alice.get("/boards/vision/data/plugins_listing").json()
    assert WORKS in listing and LOAD_FAILS not in listing

    # The broken ones off through the API (owner): the board is replaced, without errors.
    changed = alice.put("/api/v1/projects/vision/board/settings", json={"plugins": [WORKS]})
    assert changed.status_code == 200, changed.text
    assert changed.json()["settings"]["plugins"] == [WORKS]
    wait_until(lambda: board_status(alice)["plugin_errors"] == [], timeout=90,
               what="the board without the broken plugins")  # fmt: skip
    assert greeting() == GREETING


def test_a_container_board_has_the_profiler_and_the_extra_plugins_of_its_image(
    make_server: Callable[..., TbhubServer], browser: Browser, tmp_path: Path, installation: str
) -> None:
    wheels = tmp_path / "wheels"
    build_wheel(wheels)
    server = make_server(board_backend="docker", installation_id=installation,
                         board_plugins=json.dumps([f"{PACKAGE}=={VERSION}"]))  # fmt: skip
    server.env.update(PIP_FIND_LINKS=str(wheels), PIP_NO_INDEX="1")
    server.add_user("alice", "alice-password")
    project = server.add_project("vision", owner="alice")
    write_run(project / "train", steps=3, tags=1)
    worker = write_profiler_trace(project / "train").name.split(".")[0]
    # The one command: the plugins beside tbhub and a board image that holds them.
    done = subprocess.run([TBHUB, "admin", "plugins", "install", "--json"], env=server.env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    installed = json.loads(done.stdout)
    assert installed["image"] and set(installed["plugins"]) == {WORKS, IMPORT_FAILS, LOAD_FAILS}
    server.cli("admin", "board", "set", "vision", "--plugin", WORKS, "--plugin", LOAD_FAILS,
               "--plugin", "pytorch_profiler")  # fmt: skip
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    assert board_status(alice)["instance"]
    assert alice.get(f"/boards/vision/data/plugin/{WORKS}/hello").text == GREETING
    assert_profiler_reads_the_trace(alice, worker)
    status = wait_until(lambda: (s := board_status(alice))["plugin_errors"] and s, timeout=30,
                        what="the plugin errors in the board's status")  # fmt: skip
    assert isinstance(status, dict)
    assert [e["plugin"] for e in status["plugin_errors"]] == [LOAD_FAILS]
    assert_profiler_tab_shows(browser, server, worker)
