"""A board page in a real Chromium (Debian's, driven by Playwright): the starting page shows
TensorBoard the moment the board is ready, by a long-poll on the board's state, and a board
page loads without a 404 or a console error."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response

from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import board_row
from tests.e2e.test_boards import wait_for_board
from tests.e2e.test_supervisor_restart import started_server
from tests.scripts import write_script

# A board that takes longer to come up than the old starting page's fixed 2 s reload: then
# the old page loaded itself at least twice, and showed the board up to 2 s after it was up.
SLOW_BOARD = """\
import os, sys, time
time.sleep(2.5)
os.execv(sys.executable, [sys.executable, "-m", "tbhub.supervisor.board_process", *sys.argv[1:]])
"""


def signed_in(browser: Browser, server: TbhubServer) -> BrowserContext:
    """A browser context holding alice's session cookie."""
    client = server.sign_in("alice", "alice-password")
    context = browser.new_context()
    context.add_cookies([{"name": name, "value": value, "url": server.base_url}
                         for name, value in client.cookies.items()])  # fmt: skip
    return context


@pytest.fixture
def slow_server(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    server = make_server()
    server.env["TBHUB_TENSORBOARD_BIN"] = str(
        write_script(server.data_dir.parent / "slow-tensorboard", SLOW_BOARD)
    )
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    server.start()
    return server


@pytest.fixture
def context(browser: Browser, slow_server: TbhubServer) -> Iterator[BrowserContext]:
    context = signed_in(browser, slow_server)
    try:
        yield context
    finally:
        context.close()


def board_documents(page: Page, board_url: str) -> list[str]:
    """What each load of the board's URL in `page` got, as it comes: "waiting" (the starting
    page) or "board" (TensorBoard's page)."""
    documents: list[str] = []

    def on_response(response: Response) -> None:
        if response.request.is_navigation_request() and response.url == board_url:
            documents.append("board" if response.status == 200 and
                             "tb-webapp" in response.text() else "waiting")  # fmt: skip

    page.on("response", on_response)
    return documents


def test_the_starting_page_shows_the_board_the_moment_it_is_ready_without_a_board_bar(
    slow_server: TbhubServer, context: BrowserContext
) -> None:
    board_url = f"{slow_server.base_url}/boards/vision/"
    page = context.new_page()
    documents = board_documents(page, board_url)
    # The documents loaded when the board bar asked for its data: nginx adds the bar's script
    # to the starting page too (it is served under the board's URL), where it must stay idle.
    bar_asked_on: list[int] = []
    page.on("request", lambda request: bar_asked_on.append(len(documents))
            if request.url.endswith("/api/v1/boards/vision/bar") else None)  # fmt: skip
    # What the starting page asked while it waited: the long-poll on the board's state, and
    # no poll of the board itself on a timer.
    follows: list[str] = []
    polls: list[str] = []
    page.on("request", lambda request: follows.append(request.url) if documents == ["waiting"]
            and "/api/v1/boards/vision/state" in request.url else None)  # fmt: skip
    page.on("request", lambda request: polls.append(request.url) if documents == ["waiting"]
            and request.url.endswith("/boards/vision/data/runs") else None)  # fmt: skip
    page.goto(board_url)
    page.wait_for_selector("tb-webapp", timeout=60_000, state="attached")
    shown_at = page.evaluate("performance.timeOrigin") / 1000  # when the board's load began
    ready = board_row(slow_server)
    assert ready.observed_at is not None and ready.upstream is not None
    # The page loaded once and went to the board when its long-poll answered "ready": not by
    # a fixed reload, which loaded it again every 2 s and came up to 2 s late.
    assert documents == ["waiting", "board"], documents
    late = shown_at - ready.observed_at.timestamp()
    assert late < 1.0, f"the board was shown {late:.2f} s after it was ready"
    # One long-poll answered when the board became ready (it waits up to 25 s; the board
    # took about 3), and the board's runs were never polled.
    assert [url.split("?", 1)[1] for url in follows] == ["since=board_starting&wait=25"]
    assert polls == []
    page.wait_for_selector("text=run-01", timeout=30_000)
    page.wait_for_selector("#tbhub-bar", timeout=30_000)
    assert bar_asked_on == [2], f"the bar asked for its data on documents {bar_asked_on}"
    # The starting page prefetched TensorBoard's big script (the control plane answered it
    # while the board started): the board's page took it from the cache.
    from_cache = page.evaluate("""performance.getEntriesByType("resource")
        .filter((e) => new URL(e.name).pathname.endsWith("/index.js"))
        .map((e) => e.transferSize)""")
    assert from_cache == [0], f"index.js transferred {from_cache} bytes"


def test_a_navigation_to_a_stopped_board_waits_for_it_at_the_gate_and_opens_tensorboard(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    """A board forked from the zygote serves in a few tenths of a second: the browser's
    navigation waits for it at the gate (TBHUB_BOARD_START_HOLD; 4 s here, for a loaded
    host) and gets TensorBoard's page, with no starting page and no second navigation."""
    server = make_server(board_start_hold="4")
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    server.start()
    wait_for_board(server.sign_in("alice", "alice-password"), "vision")  # the zygote is warm
    server.cli("admin", "board", "stop", "vision")
    wait_until(lambda: not list(server.board_state_dir.glob("*.json")), timeout=60,
               what="the board to stop")  # fmt: skip
    board_url = f"{server.base_url}/boards/vision/"
    context = signed_in(browser, server)
    try:
        page = context.new_page()
        documents = board_documents(page, board_url)
        follows: list[str] = []
        page.on("request", lambda request: follows.append(request.url)
                if "/api/v1/boards/vision/state" in request.url else None)  # fmt: skip
        page.goto(board_url)
        page.wait_for_selector("text=run-01", timeout=30_000)
        assert documents == ["board"], documents
        assert follows == []
    finally:
        context.close()


def test_a_navigation_waits_no_longer_than_the_bound_and_the_boards_own_calls_not_at_all(
    slow_server: TbhubServer,
) -> None:
    """A board that takes longer than TBHUB_BOARD_START_HOLD (1.5 s by default; this one
    sleeps 2.5 s first): the navigation gets the starting page after the bound, while the
    board's own calls, asked at the same time, get their 503 at once."""
    alice = slow_server.sign_in("alice", "alice-password")
    navigation = {"Accept": "text/html", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    call = {"Accept": "application/json", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
    timed: dict[str, float] = {}

    def navigate() -> None:
        started = time.monotonic()
        page = alice.get("/boards/vision/", headers=navigation)
        timed["navigation"] = time.monotonic() - started
        assert page.status_code == 200 and 'data-tbhub="board-starting"' in page.text

    held = threading.Thread(target=navigate)
    held.start()
    time.sleep(0.2)
    started = time.monotonic()
    runs = alice.get("/boards/vision/data/runs", headers=call)
    timed["call"] = time.monotonic() - started
    held.join()
    assert runs.status_code == 503 and runs.json()["error"]["code"] == "board_starting"
    assert timed["call"] < 1.0, timed
    assert 1.5 <= timed["navigation"] < 3.0, timed


def test_a_board_page_loads_with_no_404_and_no_console_error_and_links_back(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    """TensorBoard's page asks for its fonts at /font-roboto/ on the site root, whatever its
    path prefix; tbhub serves them from the board, so nothing on the page fails to load."""
    server = started_server(make_server)
    context = signed_in(browser, server)
    try:
        page = context.new_page()
        failed: list[str] = []
        fonts: list[str] = []
        errors: list[str] = []

        def on_response(response: Response) -> None:
            if response.status >= 400:
                failed.append(f"{response.status} {response.url}")
            if response.url.endswith(".woff2"):
                fonts.append(f"{response.status} {response.url}")

        page.on("response", on_response)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{server.base_url}/boards/vision/")
        page.wait_for_selector("text=run-01", timeout=30_000)
        page.evaluate("document.fonts.ready.then(() => document.fonts.size)")
        page.wait_for_load_state("networkidle")
        assert fonts, "the page loaded no font: the check below would prove nothing"
        assert all(f.startswith("200 ") and "/boards/vision/font-roboto/" in f for f in fonts), (
            fonts
        )
        assert failed == [] and errors == [], (failed, errors)
        # nginx replaces every font URL; tbhub's bar is still added once, and the board's
        # name in it leads back to the project's runs.
        assert page.locator('script[src="/static/board-bar.js"]').count() == 1
        name = page.locator('#tbhub-bar a[data-tbhub="board-page"]')
        assert name.inner_text() == "vision"
        assert name.get_attribute("href") == f"{server.base_url}/projects/vision"
        # The projector's tab is missing: the bar says it is off, and why, and how to turn
        # it on, when asked.
        off = page.locator('#tbhub-bar [data-tbhub="plugins-off"]')
        assert off.inner_text() == "PROJECTOR, PYTORCH_PROFILER off"
        panel = page.locator("#tbhub-plugins-off")
        assert panel.is_hidden()
        off.click()
        assert panel.is_visible() and off.get_attribute("aria-expanded") == "true"
        assert "projector is off (reads checkpoint files outside the logdir" in (panel.inner_text())
        assert "tbhub admin board set vision --plugin projector" in panel.inner_text()
        # alice owns vision: the panel links to the page that turns it on.
        toggle = panel.locator('li[data-plugin="projector"] a[data-tbhub="plugin-toggle"]')
        assert toggle.get_attribute("href") == (
            f"{server.base_url}/projects/vision/board#plugins-heading"
        )
    finally:
        context.close()


def test_the_project_pages_prerender_rules_reach_chromium_past_its_csp(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    """While the board serves, the project page's Speculation Rules (prerender the board page)
    are parsed by Chromium, not blocked by the page's CSP. Playwright's own session keeps
    Chromium from prerendering (tests/support/tab_cdp.py, which test_board_prerender.py
    drives); the rule set is what the page controls."""
    server = started_server(make_server)
    context = signed_in(browser, server)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        session = context.new_cdp_session(page)
        rule_sets: list[dict[str, object]] = []
        session.on("Preload.ruleSetUpdated", lambda event: rule_sets.append(event["ruleSet"]))
        session.send("Preload.enable")
        page.goto(f"{server.base_url}/projects/vision")
        page.wait_for_timeout(200)
        assert len(rule_sets) == 1, rule_sets
        assert "errorType" not in rule_sets[0], rule_sets[0]
        assert '"urls": ["/boards/vision/"]' in str(rule_sets[0]["sourceText"])
        assert not [e for e in errors if "Content Security Policy" in e], errors
    finally:
        context.close()


def hook_calls(server: TbhubServer) -> int:
    """The auth hook's answers so far, from the control plane's JSON access lines."""
    lines = (json.loads(line) for line in server.log().splitlines() if line.startswith("{"))
    return sum(line.get("logger") == "tbhub.access" and line.get("route") == "/_auth/board"
               for line in lines)  # fmt: skip


def test_a_board_pages_requests_are_let_in_on_the_hooks_first_answer(
    make_server: Callable[..., TbhubServer], browser: Browser
) -> None:
    """A board page asks for its script, data, fonts and icons at twenty-odd URIs. nginx
    asks the auth hook for the first (the page) and lets the others in on that answer, which
    holds for the whole board for a caller kept from no dashboard (X-Board-Scope): one
    control-plane round trip per page, not one per URI, while the answer is kept (5 s)."""
    server = make_server(log_format="json").start_with_alice(runs=2)
    wait_for_board(server.sign_in("alice", "alice-password"), "vision")
    if "tbhub_gate" not in (server.data_dir / "nginx" / "nginx.conf").read_text():
        pytest.skip("nginx without the Lua module keys proxy_cache on each URI")
    context = signed_in(browser, server)  # a new session: nginx holds no answer for it yet
    try:
        page = context.new_page()
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url)
                if "/boards/vision/" in request.url else None)  # fmt: skip
        before = hook_calls(server)
        started = time.monotonic()
        page.goto(f"{server.base_url}/boards/vision/")
        page.wait_for_selector("text=run-01", timeout=30_000)
        page.wait_for_load_state("networkidle")
        took = time.monotonic() - started
        # The access line of the page's own hook call is written before its answer.
        calls = wait_until(lambda: hook_calls(server) - before or None, timeout=10,
                           what="the hook's access line")  # fmt: skip
        assert len(set(asked)) >= 10, asked
        # One answer, and one more each time a kept answer runs out while the page loads.
        assert calls <= 1 + int(took // 5), (calls, took, sorted(set(asked)))
    finally:
        context.close()
