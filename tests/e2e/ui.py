"""What every browser test of tbhub's pages shares: sign in through the form, check a page
with axe-core, and save a screenshot of it as a test artifact.

Screenshots land in `test-artifacts/screenshots/` (TBHUB_TEST_ARTIFACTS overrides the
folder); the docs show the key ones, copied to docs/screenshots/, except the project and
run pages: the tests' hold names and notes with markup, so docs/screenshots/project_page.py
takes the docs' from a demo instance with clean ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, Page

REPO = Path(__file__).resolve().parents[2]
AXE_SCRIPT = REPO / "tests" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
ARTIFACTS = Path(os.environ.get("TBHUB_TEST_ARTIFACTS", REPO / "test-artifacts"))
# axe-core impacts that fail a test; "moderate" and "minor" are reported, not failed.
BLOCKING_IMPACTS = {"serious", "critical"}


def sign_in(page: Page, base_url: str, name: str, password: str, *, next_path: str = "/") -> None:
    page.goto(f"{base_url}/auth/login?next={next_path}")
    page.get_by_label("User name").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def signed_in(
    browser: Browser, base_url: str, name: str, *, height: int = 900
) -> tuple[BrowserContext, Page]:
    """A fresh browser context (1280 px wide) signed in as `name`, whose password is
    `<name>-password` as the browser tests' users have it."""
    context = browser.new_context(viewport={"width": 1280, "height": height})
    page = context.new_page()
    sign_in(page, base_url, name, f"{name}-password")
    return context, page


def axe_violations(page: Page, include: list[str] | None = None) -> list[dict[str, object]]:
    """Run axe-core on the page as it is now (or only on the elements the `include`
    selectors name); the serious and critical violations."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol: tbhub's CSP (script-src 'self') blocks a
        # script tag, as it should, and the page is checked under its real policy.
        page.evaluate(AXE_SCRIPT.read_text() + "\n;void 0")
    result = page.evaluate(
        "include => axe.run(include ? {include: include.map(s => [s])} : document, "
        "{resultTypes: ['violations']})",
        include,
    )
    return [
        {"id": v["id"], "impact": v["impact"], "help": v["help"],
         "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in BLOCKING_IMPACTS
    ]  # fmt: skip


def assert_accessible(page: Page, include: list[str] | None = None) -> None:
    violations = axe_violations(page, include)
    assert not violations, f"axe-core on {page.url}:\n{json.dumps(violations, indent=1)}"


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    path = ARTIFACTS / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path


def check_page(page: Page, name: str, *, include: list[str] | None = None) -> None:
    """Every page a browser test visits: a screenshot, and no serious axe-core violation.
    On a page that is not tbhub's (a board: TensorBoard's own markup), `include` narrows
    axe to tbhub's own elements there (CSS selectors)."""
    screenshot(page, name)
    assert_accessible(page, include)
