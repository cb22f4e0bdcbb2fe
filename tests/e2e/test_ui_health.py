"""The run-health pages in a real Chromium against a real `tbhub serve` (nginx, the watcher,
the health monitor, TensorBoard): real writers write a healthy run and one that turns NaN,
the monitor raises the incident, and the pages show it: a badge on the project page, the
run's timeline linking into the board filtered to that run and curve, the rules page where
an owner tunes a detector, the channels page whose "Send a test" reaches a real receiver on
loopback, and a user's email preference. A viewer sees the rules and channels but cannot
change them: the role table covers admin, owner, editor, viewer and a non-member.
axe-core and a screenshot on every tbhub page visited."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import select

from tbhub.core.models import NotificationChannel, Project, Role
from tbhub.domain.projects import set_membership
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.ui import ARTIFACTS, check_page, screenshot, signed_in
from tests.health.notify_receivers import Answer, Received, WebhookReceiver, signature_ok
from tests.health.writers import RunSpec, write_runs

pytestmark = pytest.mark.e2e

BOARD_TIMEOUT_MS = 120_000  # a cold board: the starting page reloads until TensorBoard answers
NAN_STEP = 120


class Site:
    def __init__(self, server: TbhubServer, receiver: WebhookReceiver) -> None:
        self.server = server
        self.receiver = receiver
        self.api = server.sign_in("alice", "alice-password")

    @property
    def url(self) -> str:
        return self.server.base_url

    def run_id(self, path: str) -> int:
        runs = self.api.get("/api/v1/projects/vision/runs").json()["runs"]
        return next(int(run["id"]) for run in runs if run["path"] == path)

    def incidents(self, run: str) -> list[dict[str, object]]:
        answer = self.api.get("/api/v1/projects/vision/incidents", params={"run": run})
        return answer.json()["incidents"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """alice owns `vision`, bob edits it, carol views it, dave is on no project, root is an
    admin. After the server starts, torch's SummaryWriter writes a healthy run and
    tensorboardX's a run whose loss turns NaN at step NAN_STEP; the monitor raises it."""
    root = tmp_path_factory.mktemp("ui-health")
    with WebhookReceiver() as receiver:
        server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}",
                             notify_allow_networks='["127.0.0.0/8"]',
                             notify_smtp_host="127.0.0.1", health_interval="0.5")  # fmt: skip
        try:
            server.add_user("root", "root-password", admin=True)
            for name in ("alice", "bob", "carol", "dave"):
                server.add_user(name, f"{name}-password")
            project = server.add_project("vision", owner="alice")
            with server.db() as session:
                for name, role in (("bob", Role.editor), ("carol", Role.viewer)):
                    set_membership(session, project="vision", user=name, role=role,
                                   actor="test")  # fmt: skip
                # The team's Slack-format channel, there before anything goes wrong.
                session.add(NotificationChannel(
                    project_id=session.scalar(select(Project.id)), name="team-slack",
                    kind="slack", url=receiver.url("/slack"), recipients=[], detectors=[],
                    enabled=True, created_by="alice",
                ))  # fmt: skip
            server.start()
            site = Site(server, receiver)
            write_runs({
                project / "steady": RunSpec("steady", "torch", steps=200, seed=7),
                project / "resnet-nan": RunSpec("resnet-nan", "tensorboardX", "nan", steps=200,
                                               bad_step=NAN_STEP, seed=8),
            })  # fmt: skip
            wait_until(lambda: site.incidents("resnet-nan"), timeout=60,
                       what="the monitor to raise the NaN of the run `resnet-nan`")  # fmt: skip
            yield site
        finally:
            server.cleanup()


def posts_to(receiver: WebhookReceiver, path: str, count: int) -> list[Received]:
    """The receiver's requests to `path`, once there are `count` of them."""
    wait_until(lambda: len([r for r in receiver.received if r.path == path]) >= count,
               timeout=30, what=f"{count} requests to {path}")  # fmt: skip
    return [r for r in receiver.received if r.path == path]


@pytest.fixture
def alice(site: Site, browser: Browser) -> Iterator[Page]:
    context, page = signed_in(browser, site.url, "alice")
    page.on("dialog", lambda dialog: pytest.fail(f"a page ran a script: {dialog.message}"))
    try:
        yield page
    finally:
        context.close()


def test_the_project_page_shows_each_runs_health(site: Site, alice: Page) -> None:
    alice.goto(f"{site.url}/projects/vision")
    nan_run, steady = site.run_id("resnet-nan"), site.run_id("steady")
    badge = alice.locator(f'[data-health="{nan_run}"]')
    # The writer's loss and grad norm both turned NaN: two incidents, one per curve.
    expect(badge).to_have_text("NaN +1: 2 open incidents; the worst: NaN on resnet-nan")
    expect(badge).to_have_class("badge health-error")
    expect(alice.locator(f'[data-health="{steady}"]')).to_have_text("healthy")
    check_page(alice, "health-project")
    badge.click()
    alice.wait_for_url(f"{site.url}/projects/vision/runs/{nan_run}#incidents")
    expect(alice.locator("ol.timeline li")).to_have_count(2)


def test_the_run_timeline_links_to_the_board_on_that_run_and_curve(site: Site, alice: Page) -> None:
    found = {i["tag"]: i for i in site.incidents("resnet-nan")}
    assert set(found) == {"train/loss", "train/grad_norm"}, found
    incident = found["train/loss"]
    assert incident["detector"] == "nan" and incident["step"] == NAN_STEP, incident
    alice.goto(f"{site.url}/projects/vision/runs/{site.run_id('resnet-nan')}")
    entry = alice.locator(f'ol.timeline li[data-incident="{incident["id"]}"]')
    expect(entry).to_contain_text(str(incident["message"]))
    expect(entry).to_contain_text(f"at step {NAN_STEP}, value nan")
    expect(entry.get_by_role("button", name="Resolve")).to_be_visible()
    check_page(alice, "health-run-timeline")
    link = entry.get_by_role("link", name=f"See {incident['tag']} of this run on the board")
    query = parse_qs(urlsplit(str(link.get_attribute("href"))).query)
    link.click()
    # TensorBoard's time series dashboard takes both filters from the URL.
    chart = alice.locator("scalar-card line-chart")
    expect(chart.first).to_be_visible(timeout=BOARD_TIMEOUT_MS)
    expect(alice.get_by_role("textbox", name="Filter runs (regex)")).to_have_value(
        query["runFilter"][0]
    )
    expect(alice.get_by_role("combobox", name="Filter tags (regex)")).to_have_value(
        query["tagFilter"][0]
    )
    runs_table = alice.locator("runs-data-table")
    expect(runs_table).to_contain_text("resnet-nan")
    expect(runs_table).not_to_contain_text("steady")
    expect(alice.locator("scalar-card")).to_have_count(1)  # train/loss alone, not grad_norm
    screenshot(alice, "health-board-on-incident")  # TensorBoard's own page: not tbhub's


def test_the_incident_reached_the_projects_slack_channel(site: Site) -> None:
    """The whole way: writer, watcher, monitor, outbox, worker, a Slack-format message whose
    link is the board on the run and curve. Both NaNs came in one pass: one message."""
    [message] = posts_to(site.receiver, "/slack", 1)
    body = json.loads(message.body)
    text = body["text"]
    assert "resnet-nan" in text and "train/loss" in text and "train/grad_norm" in text, text
    links = [b["text"]["text"] for b in body["blocks"] if "runFilter=" in b["text"]["text"]]
    assert len(links) == 2 and all(f"<{site.url}/boards/vision/?" in link for link in links)
    # Kept for docs/run-health.md, which shows this message.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "health-slack-message.json").write_text(json.dumps(body, indent=2))


def test_an_owner_tunes_a_rule_and_a_bad_one_is_refused(site: Site, alice: Page) -> None:
    alice.goto(f"{site.url}/projects/vision/alerts")
    expect(alice.locator("tr[data-incident]")).to_have_count(2)
    check_page(alice, "health-rules")
    alice.get_by_text("Change the grad explosion rule").click()
    form = alice.get_by_role("form", name="The grad explosion rule")
    form.get_by_label("Threshold").fill("25")
    form.get_by_label("Window").fill("40")
    form.get_by_role("button", name="Save the grad explosion rule").click()
    expect(alice.get_by_role("status")).to_have_text("Rule saved.")
    row = alice.locator('tr[data-rule="grad_explosion"]')
    expect(row).to_contain_text("25")
    expect(row).to_contain_text("40")
    expect(row).to_contain_text("by this project")

    alice.get_by_text("Change the diverging rule").click()
    form = alice.get_by_role("form", name="The diverging rule")
    form.get_by_label("Curves").fill("(unclosed")
    form.get_by_role("button", name="Save the diverging rule").click()
    expect(alice.get_by_role("alert")).to_contain_text(
        "divergence: tag_regex '(unclosed' is not a regular expression"
    )
    check_page(alice, "health-rules-refused")
    rules = {r["detector"]: r for r in site.api.get(
        "/api/v1/projects/vision/alert-rules").json()["rules"]}  # fmt: skip
    assert not rules["divergence"]["customized"]
    assert (rules["grad_explosion"]["threshold"], rules["grad_explosion"]["window"]) == (25, 40)


def test_send_a_test_reaches_the_receiver_signed(site: Site, alice: Page) -> None:
    receiver = site.receiver
    alice.goto(f"{site.url}/projects/vision/channels")
    form = alice.get_by_role("form", name="New channel")
    form.get_by_label("Kind").select_option("webhook")
    form.get_by_label("Name").fill("ops")
    form.get_by_label("URL").fill(receiver.url("/ops"))
    form.get_by_role("button", name="Add channel").click()
    secret = alice.get_by_label("The new signing secret").input_value()
    assert len(secret) >= 32
    check_page(alice, "health-channel-secret")

    alice.goto(f"{site.url}/projects/vision/channels")  # the secret is not shown again
    expect(alice.get_by_label("The new signing secret")).to_have_count(0)
    alice.get_by_role("button", name="Send a test to ops").click()
    expect(alice.get_by_role("status")).to_have_text("Test message delivered.")
    [received] = posts_to(receiver, "/ops", 1)
    assert signature_ok(secret, received)
    assert "test" in json.loads(received.body)["incidents"][0]["detector"]
    row = alice.locator("tr[data-channel]").filter(has_text="ops")
    expect(row.locator("[data-last-sent]")).to_be_visible()
    check_page(alice, "health-channels")

    receiver.answer = Answer(status=500, body=b"down for maintenance")
    try:
        alice.get_by_role("button", name="Send a test to ops").click()
        expect(alice.get_by_role("status")).to_have_text(
            "The test message was not delivered; the channel shows why."
        )
        expect(row.locator("[data-last-error]")).to_contain_text("500")
    finally:
        receiver.answer = Answer()
    check_page(alice, "health-channels-failed")


def test_a_member_chooses_email_for_a_project(site: Site, browser: Browser) -> None:
    context, bob = signed_in(browser, site.url, "bob")
    try:
        bob.goto(f"{site.url}/settings/email")
        check_page(bob, "health-email")
        bob.get_by_text("Email me about vision").click()
        form = bob.get_by_role("form", name="Email from vision")
        form.get_by_label("Address").fill("bob@example.org")
        form.get_by_label("NaN").check()
        form.get_by_label("crashed").check()
        form.get_by_label("Only on runs I started").check()
        form.get_by_role("button", name="Save email from vision").click()
        expect(bob.get_by_role("status")).to_have_text("Email preference saved.")
        expect(bob.locator("section.card")).to_contain_text(
            "Email goes to bob@example.org for nan, crashed, only on your own runs."
        )
        check_page(bob, "health-email-saved")
        answer = site.server.sign_in("bob", "bob-password").get(
            "/api/v1/users/me/email-preferences").json()  # fmt: skip
        assert answer["preferences"] == [{
            "project": "vision", "address": "bob@example.org", "detectors": ["nan", "crashed"],
            "own_runs_only": True, "last_error": None, "last_error_at": None,
        }]  # fmt: skip
    finally:
        context.close()


# Who may do what on the rules and channels pages: (user, pages answer, forms shown,
# a rule change and a new channel posted anyway answer).
ROLE_TABLE = [
    ("root", 200, True, 303),  # an instance admin: an owner everywhere
    ("alice", 200, True, 303),  # owner
    ("bob", 200, False, 403),  # editor: sees, does not change
    ("carol", 200, False, 403),  # viewer
    ("dave", 404, False, 404),  # not on the project: it is hidden
]


@pytest.mark.parametrize(("user", "status", "forms", "change"), ROLE_TABLE)
def test_only_owners_change_rules_and_channels(
    site: Site, browser: Browser, user: str, status: int, forms: bool, change: int
) -> None:
    context, page = signed_in(browser, site.url, user)
    try:
        token = page.locator('input[name="csrf_token"]').first.input_value()
        for path in ("alerts", "channels"):
            answer = page.goto(f"{site.url}/projects/vision/{path}")
            assert answer is not None and answer.status == status, (user, path)
        if status == 200:
            page.goto(f"{site.url}/projects/vision/alerts")
            expect(page.locator("details summary")).to_have_count(7 if forms else 0)
            page.goto(f"{site.url}/projects/vision/channels")
            expect(page.get_by_role("form", name="New channel")).to_have_count(1 if forms else 0)
            expect(page.get_by_role("button", name="Send a test", exact=False)).to_have_count(
                page.locator("tr[data-channel]").count() if forms else 0
            )
            check_page(page, f"health-roles-{user}")
        rule = page.request.post(f"{site.url}/projects/vision/alerts/plateau",
                                 form={"csrf_token": token, "enabled": "on"},
                                 max_redirects=0)  # fmt: skip
        channel = page.request.post(f"{site.url}/projects/vision/channels",
                                    form={"csrf_token": token, "kind": "slack",
                                          "channel_name": f"by-{user}",
                                          "url": site.receiver.url(f"/{user}")},
                                    max_redirects=0)  # fmt: skip
        assert (rule.status, channel.status) == (change, change), user
        names = [c["name"] for c in site.api.get(
            "/api/v1/projects/vision/channels").json()["channels"]]  # fmt: skip
        assert (f"by-{user}" in names) == (change == 303)
    finally:
        context.close()
