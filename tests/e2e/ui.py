"""What every browser test of tbhub's pages shares: sign in through the form, check a page
with axe-core, and save a screenshot of it as a test artifact.

Screenshots land in `test-artifacts/screenshots/` (TBHUB_TEST_ARTIFACTS overrides the
folder); the README shows the key ones, copied to docs/screenshots/."""

from __future__ import annotations

import json
import os
from pathlib import Path

from playwright.sync_api import Page

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


def axe_violations(page: Page) -> list[dict[str, object]]:
    """Run axe-core on the page as it is now; the serious and critical violations."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        # Evaluated through the DevTools protocol: tbhub's CSP (script-src 'self') blocks a
        # script tag, as it should, and the page is checked under its real policy.
        page.evaluate(AXE_SCRIPT.read_text() + "\n;void 0")
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    return [
        {"id": v["id"], "impact": v["impact"], "help": v["help"],
         "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in BLOCKING_IMPACTS
    ]  # fmt: skip


def assert_accessible(page: Page) -> None:
    violations = axe_violations(page)
    assert not violations, f"axe-core on {page.url}:\n{json.dumps(violations, indent=1)}"


def screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    path = ARTIFACTS / "screenshots" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path


def check_page(page: Page, name: str) -> None:
    """Every page a browser test visits: a screenshot, and no serious axe-core violation."""
    screenshot(page, name)
    assert_accessible(page)
