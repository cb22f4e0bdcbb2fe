"""The project settings pages in a real Chromium, through nginx, on one server: add a member
who then opens the board, make a token that a job then uses, make a share link that opens
the board (and nothing else) in a fresh browser, and restore a trashed run. axe-core and a
screenshot on every tbhub page visited."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tbhub.core.models import Role
from tbhub.domain.projects import set_membership
from tbhub.http.templating import size as human_size
from tbhub.storage.sample_logs import write_project, write_run
from tests.e2e.harness import TBHUB, TbhubServer
from tests.e2e.ui import check_page, screenshot, sign_in, signed_in
from tests.forms import form_token

BOARD_TIMEOUT_MS = 60_000  # a cold board: the starting page reloads until TensorBoard answers


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TbhubServer]:
    """alice owns `vision` (two runs written by a real writer); carol is its viewer; bob is
    on no project until a test adds him."""
    root = tmp_path_factory.mktemp("settings")
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        for name in ("alice", "bob", "carol"):
            server.add_user(name, f"{name}-password")
        write_project(server.add_project("vision", owner="alice"), runs=2, steps=10, tags=1)
        with server.db() as session:
            set_membership(session, project="vision", user="carol", role=Role.viewer,
                           actor="test")  # fmt: skip
        server.start()
        yield server
    finally:
        server.cleanup()


def wait_for_board(page: Page) -> None:
    """TensorBoard's own app has rendered and lists the project's runs."""
    page.wait_for_selector("tb-webapp", timeout=BOARD_TIMEOUT_MS, state="attached")
    page.wait_for_selector("text=run-01", timeout=BOARD_TIMEOUT_MS)


def test_an_owner_adds_a_member_who_then_opens_the_board(
    server: TbhubServer, browser: Browser
) -> None:
    bob_context, bob = signed_in(browser, server.base_url, "bob")
    alice_context, alice = signed_in(browser, server.base_url, "alice")
    try:
        refused = bob.goto(f"{server.base_url}/boards/vision/")
        assert refused is not None and refused.status == 404  # not a member: no board

        alice.goto(f"{server.base_url}/projects/vision/members")
        check_page(alice, "members")
        add = alice.get_by_role("form", name="Add a person")
        add.get_by_label("User name").fill("bob")
        add.get_by_label("Role").select_option("viewer")
        add.get_by_role("button", name="Add person").click()
        expect(alice.get_by_role("status")).to_have_text("Member added.")
        expect(alice.get_by_label("Role of bob")).to_have_value("viewer")
        check_page(alice, "members-added")

        bob.goto(f"{server.base_url}/boards/vision/")
        wait_for_board(bob)
        screenshot(bob, "members-new-member-board")  # TensorBoard's own page: not tbhub's

        # A viewer, not an owner: the members page is not for him.
        page = bob.goto(f"{server.base_url}/projects/vision/members")
        assert page is not None and page.status == 403
        check_page(bob, "members-forbidden")
    finally:
        bob_context.close()
        alice_context.close()


def test_a_viewer_gets_403_on_every_members_and_share_form(server: TbhubServer) -> None:
    carol = server.sign_in("carol", "carol-password")
    token = form_token(carol, "/")  # a valid token of her own session: only her role is wrong
    html = {"Accept": "text/html"}
    assert carol.get("/projects/vision/members", headers=html).status_code == 403
    assert carol.get("/projects/vision/share", headers=html).status_code == 403
    forms = {
        "/projects/vision/members": {"member": "bob", "role": "owner"},
        "/projects/vision/members/alice/role": {"role": "viewer"},
        "/projects/vision/members/alice/remove": {},
        "/projects/vision/teams": {"team": "crew", "role": "owner"},
        "/projects/vision/teams/crew/remove": {},
        "/projects/vision/share": {"expires": "24"},
        "/projects/vision/share/1/revoke": {},
    }
    for path, data in forms.items():
        response = carol.post(path, data={**data, "csrf_token": token}, headers=html)
        assert response.status_code == 403, (path, response.status_code)
    members = server.sign_in("alice", "alice-password").get("/api/v1/projects/vision/members")
    assert {m["user"]: m["role"] for m in members.json()["members"]}["alice"] == "owner"


def test_a_token_made_on_the_page_registers_a_run_from_a_job(
    server: TbhubServer, browser: Browser, tmp_path: Path
) -> None:
    context, page = signed_in(browser, server.base_url, "alice")
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.base_url)
    try:
        page.goto(f"{server.base_url}/settings/tokens")
        check_page(page, "tokens")
        form = page.get_by_role("form", name="New token")
        form.get_by_label("Name").fill("ci-train")
        form.get_by_label("write:").check()
        form.get_by_label("vision").check()
        form.get_by_label("Expires").select_option("7")
        form.get_by_role("button", name="Create token").click()

        secret = page.get_by_label("The new token").input_value()
        assert secret.startswith("tbh_") and len(secret) == 47
        page.get_by_role("button", name="Copy token").click()
        expect(page.locator(".copy-status")).to_have_text("Copied.")
        assert page.evaluate("navigator.clipboard.readText()") == secret
        login_line = page.locator("pre").inner_text()
        assert login_line == f"tbhub login --url {server.base_url} --token-stdin"
        check_page(page, "tokens-created")

        # The job's side: the login line shown, with the token pasted, then a run.
        env = {k: v for k, v in os.environ.items() if not k.startswith("TBHUB_")}
        env["TBHUB_CLIENT_CONFIG"] = str(tmp_path / "client.json")

        def job(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run([TBHUB, *args], input=stdin, env=env, capture_output=True,
                                  text=True, timeout=120)  # fmt: skip

        login = job(*login_line.split()[1:], stdin=secret + "\n")
        assert login.returncode == 0, login.stderr
        made = job("runs", "create", "-p", "vision", "--name", "from-token", "--json")
        assert made.returncode == 0, made.stderr
        run = json.loads(made.stdout)
        assert Path(run["logdir"]).is_dir()
        assert run["created_by"] == "alice"

        page.goto(f"{server.base_url}/settings/tokens")
        row = page.get_by_role("row").filter(has_text="ci-train")
        expect(row.locator("time")).to_have_count(3)  # created, expires, and now last used
        check_page(page, "tokens-used")

        row.get_by_role("button", name="Revoke").click()
        expect(page.get_by_role("status")).to_have_text("Token revoked.")
        expect(page.get_by_role("row").filter(has_text="ci-train")).to_contain_text("revoked")
        refused = job("runs", "list", "-p", "vision", "--json")
        assert refused.returncode != 0 and "revoked" in refused.stdout + refused.stderr
    finally:
        context.close()


def test_a_share_link_opens_the_board_in_a_fresh_browser_and_nothing_else(
    server: TbhubServer, browser: Browser
) -> None:
    context, page = signed_in(browser, server.base_url, "alice")
    guest_context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{server.base_url}/projects/vision/share")
        check_page(page, "share-links")
        form = page.get_by_role("form", name="New share link")
        form.get_by_label("Works for").select_option("24")
        form.get_by_label("Note").fill("reviewers <at> the lab")
        form.get_by_role("button", name="Create link").click()
        url = page.get_by_label("The new share link").input_value()
        assert url.startswith(f"{server.base_url}/share/tbs_")
        expect(page.get_by_role("button", name="Copy link")).to_be_visible()
        row = page.get_by_role("row").filter(has_text="reviewers <at> the lab")
        expect(row).to_contain_text("alice")
        expect(row).to_contain_text("active")
        check_page(page, "share-links-created")

        guest = guest_context.new_page()  # no account, no cookies
        guest.goto(url)
        # TensorBoard may already have added its dashboard as the fragment (#timeseries).
        assert guest.url.split("#")[0] == f"{server.base_url}/boards/vision/"
        wait_for_board(guest)
        screenshot(guest, "share-link-board")  # TensorBoard's own page
        api = guest.goto(f"{server.base_url}/api/v1/projects")
        assert api is not None and api.status == 401
        guest.goto(f"{server.base_url}/projects/vision/members")
        assert guest.url.startswith(f"{server.base_url}/auth/login")
        check_page(guest, "share-link-guest-sign-in")

        row.get_by_role("button", name="Revoke").click()
        expect(page.get_by_role("status")).to_have_text("Share link revoked.")
        expect(page.get_by_role("row").filter(has_text="reviewers <at> the lab")).to_contain_text(
            "revoked"
        )
    finally:
        guest_context.close()
        context.close()


def test_a_trashed_run_comes_back_with_the_restore_button(
    server: TbhubServer, browser: Browser
) -> None:
    api = server.sign_in("alice", "alice-password")
    made = api.post("/api/v1/projects/vision/runs", json={"name": "restore-me"})
    assert made.status_code == 201, made.text
    run = made.json()
    write_run(Path(run["logdir"]), steps=5, tags=1)
    trashed = api.delete(f"/api/v1/projects/vision/runs/{run['id']}")
    assert trashed.status_code == 200 and trashed.json()["retention_state"] == "trashed"
    assert not Path(run["logdir"]).exists()

    context, page = signed_in(browser, server.base_url, "alice")
    try:
        page.goto(f"{server.base_url}/projects/vision/retention")
        # The plan, with bytes: keep only the newest run, and count nothing as active.
        page.get_by_text("Change this project's policy").click()
        policy = page.get_by_role("form", name="Retention policy")
        policy.get_by_label("Keep the newest N runs").fill("1")
        policy.get_by_label("Minutes a run counts as active").fill("0")
        policy.get_by_role("button", name="Save policy").click()
        expect(page.get_by_role("status")).to_have_text("Retention policy saved.")
        plan = page.get_by_role("table", name="Dry run: what retention would do now")
        [planned] = plan.get_by_role("row").filter(has_text="run-0").all()
        cells = planned.get_by_role("cell").all_inner_texts()
        run_dir = server.storage / "vision" / cells[0]
        size = sum(f.stat().st_size for f in run_dir.iterdir())
        assert cells[1:3] == [human_size(size), "1"]  # its bytes and files, as on disk
        assert cells[4] == "beyond the newest runs kept"

        trash = page.get_by_role("table", name="Trash")
        entry = trash.get_by_role("row").filter(has_text=run["path"])
        expect(entry).to_contain_text("deleted")
        check_page(page, "retention")
        entry.get_by_role("button", name="Restore").click()
        expect(page.get_by_role("status")).to_have_text("Restored from the trash.")
        expect(page.get_by_text("The trash holds no run of vision.")).to_be_visible()
        check_page(page, "retention-restored")
    finally:
        context.close()

    assert Path(run["logdir"]).is_dir() and any(Path(run["logdir"]).iterdir())
    again = api.get(f"/api/v1/projects/vision/runs/{run['id']}").json()
    assert again["retention_state"] == "present"


def test_the_settings_pages_fit_a_phone(server: TbhubServer, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 360, "height": 740})
    try:
        page = context.new_page()
        sign_in(page, server.base_url, "alice", "alice-password")
        for path, name in (("/projects/vision/members", "members-phone"),
                           ("/settings/tokens", "tokens-phone"),
                           ("/projects/vision/share", "share-links-phone"),
                           ("/projects/vision/retention", "retention-phone")):  # fmt: skip
            page.goto(f"{server.base_url}{path}")
            # Nothing wider than the screen: wide tables scroll inside their own box.
            overflow = page.evaluate("() => document.documentElement.scrollWidth - innerWidth")
            assert overflow <= 0, f"{path} is {overflow}px wider than a 360 px screen"
            check_page(page, name)
    finally:
        context.close()
