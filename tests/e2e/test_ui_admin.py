"""The admin console and what surrounds a board, in a real Chromium through the real nginx, on
one `tbhub serve` for the module: restart, stop and pin boards; create and disable users; the
audit log's filters; backups; storage; tbhub's bar on a board page, an empty project's board,
and error pages that keep the signed-in header. Non-admins get 403 on every admin page and
form. Each page is checked with axe-core and saved as a screenshot."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tbhub.storage.sample_logs import write_project, write_run
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import Load
from tests.e2e.test_boards import wait_for_board
from tests.e2e.ui import check_page, signed_in
from tests.forms import form_token

HTML = {"Accept": "text/html"}
BAR = ["#tbhub-bar"]  # on a board page axe checks tbhub's own elements, not TensorBoard's


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    root = tmp_path_factory.mktemp("ui-admin")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}",
                         backup_target=str(root / "backups"))  # fmt: skip
    try:
        server.add_user("root", "root-password", admin=True)
        server.add_user("alice", "alice-password")
        write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
        server.add_project("empty", owner="alice")
        server.add_project("quiet", owner="alice")
        server.start()
        yield server
    finally:
        server.cleanup()


def board_row(page: Page, project: str) -> tuple[str, str]:
    """(instance, observed state) of a project's row on /admin/boards, read afresh."""
    page.reload()
    row = page.locator(f'tr[data-project="{project}"]')
    return (row.locator('[data-field="instance"]').inner_text(),
            row.locator('[data-field="observed"]').inner_text())  # fmt: skip


def test_an_admin_restarts_a_board_and_readers_keep_reading(
    server: TbhubServer, browser: Browser
) -> None:
    reader = server.sign_in("alice", "alice-password")
    wait_for_board(reader, "vision")
    context, page = signed_in(browser, server.base_url, "root")
    try:
        page.goto(f"{server.base_url}/admin")
        check_page(page, "admin-overview")
        page.get_by_role("navigation", name="Admin").get_by_role("link", name="Boards").click()
        page.wait_for_url(f"{server.base_url}/admin/boards")
        wait_until(lambda: board_row(page, "vision")[1] == "ready", timeout=30,
                   what="vision's board to show ready")  # fmt: skip
        before = board_row(page, "vision")[0]
        assert before != "none"
        check_page(page, "admin-boards")
        with Load(reader, "/boards/vision/data/runs", connections=2) as load:
            page.get_by_role("button", name="Restart vision").click()
            page.wait_for_url(re.compile(r"/admin/boards\?notice=board_restarting$"))
            expect(page.get_by_role("status")).to_contain_text("being replaced")
            wait_until(lambda: board_row(page, "vision")[0] not in (before, "none"), timeout=90,
                       what="a new instance of vision's board to serve")  # fmt: skip
            wait_until(lambda: board_row(page, "vision")[1] == "ready", timeout=30,
                       what="the new instance to show ready")  # fmt: skip
        assert load.ok > 0 and load.failures == [], load.failures[:5]
        assert "admin 1" in page.locator('tr[data-project="vision"]').inner_text()
        assert wait_for_board(reader, "vision").status_code == 200
    finally:
        context.close()


def test_an_admin_stops_and_pins_a_board(server: TbhubServer, browser: Browser) -> None:
    reader = server.sign_in("alice", "alice-password")
    reader.get("/boards/quiet/", headers=HTML)  # asks for the board: it starts
    context, page = signed_in(browser, server.base_url, "root")
    try:
        page.goto(f"{server.base_url}/admin/boards")
        wait_until(lambda: board_row(page, "quiet")[1] == "ready", timeout=60,
                   what="quiet's board to start")  # fmt: skip
        page.get_by_role("button", name="Stop quiet").click()
        expect(page.get_by_role("status")).to_contain_text("stops")
        wait_until(lambda: board_row(page, "quiet") == ("none", "stopped"), timeout=60,
                   what="quiet's board to stop")  # fmt: skip

        page.get_by_role("button", name="Pin quiet").click()
        expect(page.get_by_role("status")).to_contain_text("Board pinned")
        row = page.locator('tr[data-project="quiet"]')
        expect(row.locator(".badge")).to_have_text("pinned")
        assert row.get_by_role("button", name="Unpin quiet").is_visible()
        admin = server.sign_in("root", "root-password")
        assert admin.get("/api/v1/projects/quiet/board").json()["settings"]["pinned"] is True
        row.get_by_role("button", name="Unpin quiet").click()
        expect(page.get_by_role("status")).to_contain_text("Board unpinned")
        assert admin.get("/api/v1/projects/quiet/board").json()["settings"]["pinned"] is False
    finally:
        context.close()


def test_an_admin_creates_a_user_and_disabling_them_ends_their_session(
    server: TbhubServer, browser: Browser
) -> None:
    context, page = signed_in(browser, server.base_url, "root")
    try:
        page.goto(f"{server.base_url}/admin/users")
        check_page(page, "admin-users")
        page.get_by_label("User name").fill("dora")
        page.get_by_label("Password").fill("dora-password")
        page.get_by_role("button", name="Create user").click()
        expect(page.get_by_role("status")).to_contain_text("User created")
        expect(page.locator('tr[data-user="dora"]')).to_contain_text("enabled")
        # A name taken already is refused on the page, with the reason.
        page.get_by_label("User name").fill("dora")
        page.get_by_label("Password").fill("other-password")
        page.get_by_role("button", name="Create user").click()
        expect(page.get_by_role("alert")).to_contain_text("already exists")

        dora_context, dora = signed_in(browser, server.base_url, "dora")
        try:
            assert dora.url == f"{server.base_url}/"
            page.goto(f"{server.base_url}/admin/users")
            page.get_by_role("button", name="Disable dora").click()
            expect(page.get_by_role("status")).to_contain_text("User saved")
            expect(page.locator('tr[data-user="dora"]')).to_contain_text("disabled")
            dora.goto(f"{server.base_url}/")
            assert dora.url.startswith(f"{server.base_url}/auth/login")  # the session is over
        finally:
            dora_context.close()
        # The last enabled admin can neither be disabled nor step down: the page says why.
        for button in ("Disable root", "Remove admin root"):
            page.get_by_role("button", name=button).click()
            expect(page.get_by_role("alert")).to_contain_text("last enabled admin")
            page.goto(f"{server.base_url}/admin/users")
        expect(page.locator('tr[data-user="root"]')).to_contain_text("enabled")
    finally:
        context.close()


def test_audit_filters_narrow_the_list_and_pages_go_back_in_time(
    server: TbhubServer, browser: Browser
) -> None:
    context, page = signed_in(browser, server.base_url, "root")

    def listed() -> list[tuple[int, str, str]]:
        rows = page.locator("tbody tr[data-event]")
        return [(int(r.get_attribute("data-event") or 0),
                 r.locator("td").nth(3).inner_text(), r.locator("td").nth(4).inner_text())
                for r in rows.all()]  # fmt: skip

    try:
        page.goto(f"{server.base_url}/admin/audit")
        check_page(page, "admin-audit")
        everything = listed()
        assert {a for _, a, _ in everything} >= {"user.create", "auth.sign_in"}

        page.get_by_label("Action").fill("user.create")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile(r"action=user\.create"))
        created = listed()
        assert created and {a for _, a, _ in created} == {"user.create"}
        assert len(created) < len(everything)

        page.get_by_label("User").fill("alice")
        page.get_by_role("button", name="Filter").click()
        assert [t for _, _, t in listed()] == ["alice"]

        page.goto(f"{server.base_url}/admin/audit?project=vision")
        assert listed() and all(t == "vision" or t.startswith("vision/") for _, _, t in listed())
        page.goto(f"{server.base_url}/admin/audit?since=2999-01-01")
        assert listed() == [] and page.get_by_text("No audit events match").is_visible()
        page.goto(f"{server.base_url}/admin/audit?until=2000-01-01")
        assert listed() == []

        # Two a page: "Older events" goes on from the last id, with the same filters.
        page.goto(f"{server.base_url}/admin/audit?action=user.create&limit=2")
        first = listed()
        page.get_by_role("link", name="Older events").click()
        second = listed()
        assert len(first) == 2 and second and max(i for i, _, _ in second) < first[-1][0]
        assert {a for _, a, _ in second} == {"user.create"}

        page.goto(f"{server.base_url}/admin/audit?since=yesterday")
        expect(page.get_by_role("alert")).to_contain_text("not a time")
    finally:
        context.close()


def test_the_backup_page_shows_a_snapshot_after_a_backup_run(
    server: TbhubServer, browser: Browser
) -> None:
    admin = server.sign_in("root", "root-password")
    # `tbhub serve` takes its first scheduled snapshot at start; let it finish first.
    wait_until(lambda: (admin.get("/api/v1/backups").json()["last_run"] or {}).get("state")
               == "complete", timeout=60, what="the scheduled start-up backup")  # fmt: skip
    run = server.cli("admin", "backup", "run", "--json")
    snapshot = json.loads(run.stdout)["snapshot"]
    context, page = signed_in(browser, server.base_url, "root")
    try:
        page.goto(f"{server.base_url}/admin/backups")
        check_page(page, "admin-backups")
        expect(page.locator(f'tr[data-snapshot="{snapshot}"]')).to_contain_text("complete")
        last = page.locator('[data-field="last-run"]')
        expect(last).to_contain_text(snapshot)
        expect(last).to_contain_text("by cli")
        expect(page.locator('[data-field="recovery-point"]')).to_contain_text(" old")
        page.goto(f"{server.base_url}/admin/storage")
        check_page(page, "admin-storage")
        vision = page.locator('tr[data-project="vision"]')
        expect(vision.locator("td").nth(2)).to_have_text("2")
        expect(page.locator('[data-field="free"]')).to_contain_text("free")
    finally:
        context.close()


def test_the_board_bar_names_the_project_goes_back_and_signs_out(
    server: TbhubServer, browser: Browser
) -> None:
    wait_for_board(server.sign_in("alice", "alice-password"), "vision")
    context, page = signed_in(browser, server.base_url, "alice")
    try:
        page.goto(f"{server.base_url}/boards/vision/")
        bar = page.get_by_role("navigation", name="tbhub")
        expect(bar).to_contain_text("vision")
        expect(bar).to_contain_text("alice")
        # TensorBoard's own app renders below the bar, not under it.
        expect(page.locator("tb-webapp")).to_be_visible()
        bar_bottom = bar.bounding_box()
        app_top = page.locator("tb-webapp").bounding_box()
        assert bar_bottom and app_top and app_top["y"] >= bar_bottom["y"] + bar_bottom["height"]
        check_page(page, "board-with-bar", include=BAR)

        bar.get_by_role("link", name="Projects").click()
        page.wait_for_url(f"{server.base_url}/")
        page.goto(f"{server.base_url}/boards/vision/")
        page.get_by_role("navigation", name="tbhub").get_by_role("button", name="Sign out").click()
        page.wait_for_url(f"{server.base_url}/auth/login")
        page.goto(f"{server.base_url}/boards/vision/")
        assert page.url.startswith(f"{server.base_url}/auth/login?next=")
    finally:
        context.close()


def test_a_share_link_guest_sees_a_shared_bar_without_sign_out(
    server: TbhubServer, browser: Browser
) -> None:
    owner = server.sign_in("alice", "alice-password")
    wait_for_board(owner, "vision")
    link = owner.post("/api/v1/projects/vision/share-links", json={"note": "guests"}).json()
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(server.base_url + link["url"])
        bar = page.get_by_role("navigation", name="tbhub")
        expect(bar).to_contain_text("Shared view")
        expect(bar).to_contain_text("vision")
        assert bar.get_by_role("button", name="Sign out").count() == 0
        check_page(page, "board-shared-bar", include=BAR)
    finally:
        context.close()


def test_an_empty_projects_board_says_where_to_write_runs(
    server: TbhubServer, browser: Browser
) -> None:
    context, page = signed_in(browser, server.base_url, "alice")
    try:
        page.goto(f"{server.base_url}/boards/empty/")
        panel = page.get_by_role("region", name="No runs in empty yet")
        expect(panel).to_be_visible(timeout=60_000)
        logdir = server.storage / "empty"
        expect(panel.locator('[data-tbhub="logdir"]')).to_have_text(f"{logdir}/<run>/")
        expect(panel.locator('[data-tbhub="run-command"]')).to_have_text(
            "tbhub run --project empty -- python train.py"
        )
        check_page(page, "board-empty", include=[*BAR, "#tbhub-empty"])
        # The first run's files reach the registry: the page shows the board instead.
        write_run(server.storage / "empty" / "first", steps=5, tags=1)
        expect(panel).to_be_hidden(timeout=60_000)
        expect(page.get_by_role("navigation", name="tbhub")).to_contain_text("empty")
    finally:
        context.close()


def test_a_404_page_keeps_the_signed_in_header(server: TbhubServer, browser: Browser) -> None:
    context, page = signed_in(browser, server.base_url, "root")
    try:
        response = page.goto(f"{server.base_url}/no/such/page")
        assert response is not None and response.status == 404
        expect(page.get_by_role("heading", name="Not found")).to_be_visible()
        nav = page.get_by_role("navigation", name="Main")
        expect(nav.get_by_role("link", name="Admin")).to_be_visible()
        expect(page.locator(".who")).to_contain_text("root")
        check_page(page, "error-404")
        page.get_by_role("button", name="Sign out").click()
        page.wait_for_url(f"{server.base_url}/auth/login")
        assert page.goto(f"{server.base_url}/no/such/page") is not None
        assert page.get_by_role("button", name="Sign out").count() == 0
    finally:
        context.close()


ADMIN_PAGES = ["/admin", "/admin/boards", "/admin/users", "/admin/audit", "/admin/backups",
               "/admin/storage"]  # fmt: skip
ADMIN_FORMS = [
    ("/admin/boards/vision/restart", {}),
    ("/admin/boards/vision/stop", {}),
    ("/admin/boards/vision/pin", {}),
    ("/admin/boards/vision/unpin", {}),
    ("/admin/users", {"name": "mallory2", "password": "mallory-password"}),
    ("/admin/users/root/disable", {}),
    ("/admin/users/root/remove-admin", {}),
    ("/admin/users/alice/make-admin", {}),
    ("/admin/users/dora/enable", {}),
]


@pytest.mark.parametrize("path", ADMIN_PAGES)
def test_a_non_admin_gets_403_on_every_admin_page(server: TbhubServer, path: str) -> None:
    alice = server.sign_in("alice", "alice-password")
    response = alice.get(path, headers=HTML)
    assert response.status_code == 403
    assert "the admin console is for instance admins" in response.text
    assert server.client().get(path, headers=HTML).status_code == 303  # signed out: sign in


@pytest.mark.parametrize(("path", "fields"), ADMIN_FORMS, ids=[p for p, _ in ADMIN_FORMS])
def test_a_non_admin_gets_403_on_every_admin_form(
    server: TbhubServer, path: str, fields: dict[str, str]
) -> None:
    admin = server.sign_in("root", "root-password")
    alice = server.sign_in("alice", "alice-password")
    token = form_token(alice, "/")  # a valid token of alice's session: only the role refuses
    before = last_audit_id(admin)
    response = alice.post(path, data={**fields, "csrf_token": token}, headers=HTML)
    assert response.status_code == 403
    assert "the admin console is for instance admins" in response.text
    assert last_audit_id(admin) == before  # nothing was done


def last_audit_id(admin: httpx.Client) -> int:
    response = admin.get("/api/v1/audit", params={"limit": 1})
    assert response.status_code == 200
    return int(response.json()["events"][0]["id"])


def test_the_admin_pages_read_the_same_as_their_api(server: TbhubServer) -> None:
    admin: httpx.Client = server.sign_in("root", "root-password")
    boards = {b["project"] for b in admin.get("/api/v1/boards").json()["boards"]}
    assert boards == {"vision", "empty", "quiet"}
    storage = admin.get("/api/v1/storage").json()
    assert {p["project"] for p in storage["projects"]} == boards
    assert storage["filesystem"]["free_bytes"] > 0
