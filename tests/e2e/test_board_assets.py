"""TensorBoard's own static files through nginx and the board (supervisor/board_assets.py):
the index page compressed, with a preload of the script it names last; its stamped scripts
immutable; every other file of TensorBoard's zip revalidated with a 304; nothing of the kind
for data routes, and nothing at all without a reader's credentials."""

from __future__ import annotations

import re
from collections.abc import Callable

import httpx
import pytest

from tbhub.supervisor.board_assets import IMMUTABLE, REVALIDATE, installed_assets
from tests.e2e.harness import TbhubServer
from tests.e2e.test_boards import HTML, JSON, alice_on_her_board

GZIP = {"Accept-Encoding": "gzip"}


@pytest.fixture
def alice(make_server: Callable[..., TbhubServer]) -> httpx.Client:
    return alice_on_her_board(make_server, runs=2, steps=10)


def font() -> str:
    return next(name for name in sorted(installed_assets().etags) if name.endswith(".woff2"))


def test_the_index_page_is_compressed_and_preloads_its_script(alice: httpx.Client) -> None:
    page = alice.get("/boards/vision/", headers={**HTML, **GZIP})
    assert page.status_code == 200 and "<tb-webapp>" in page.text
    assert page.headers["content-encoding"] == "gzip"
    assert page.headers["link"] == installed_assets().preload
    assert page.headers["link"].startswith("<index.js?_file_hash=")
    assert "rel=preload; as=script" in page.headers["link"]
    assert 'src="index.js?_file_hash=' in page.text  # the preload names what the page loads


def test_a_stamped_script_is_immutable_and_compressed(alice: httpx.Client) -> None:
    src = alice.get("/boards/vision/", headers=HTML).headers["link"].split(">")[0][1:]
    script = alice.get(f"/boards/vision/{src}", headers=GZIP)
    assert script.status_code == 200
    assert script.headers["cache-control"] == IMMUTABLE
    assert script.headers["etag"] == installed_assets().etags["index.js"]
    assert script.headers["content-encoding"] == "gzip"
    assert "expires" not in script.headers


def test_other_static_files_revalidate_with_a_304(alice: httpx.Client) -> None:
    name = font()
    first = alice.get(f"/boards/vision/{name}")
    assert first.status_code == 200 and first.content.startswith(b"wOF2")
    assert first.headers["cache-control"] == REVALIDATE
    etag = first.headers["etag"]
    assert etag == installed_assets().etags[name] and etag.startswith('"tb-')
    again = alice.get(f"/boards/vision/{name}", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert again.headers["etag"] == etag
    icons = alice.get("/boards/vision/icon_bundle.svg", headers=GZIP)
    assert icons.headers["content-encoding"] == "gzip"  # text: compressed


def test_data_routes_get_no_validator_and_no_lifetime(alice: httpx.Client) -> None:
    runs = alice.get("/boards/vision/data/runs", headers={**JSON, "If-None-Match": "*"})
    assert runs.status_code == 200 and sorted(runs.json()) == ["run-00", "run-01"]
    assert "etag" not in runs.headers
    assert "max-age" not in runs.headers.get("cache-control", "")


def test_without_credentials_a_valid_etag_still_gets_no_file(alice: httpx.Client) -> None:
    name = font()
    etag = installed_assets().etags[name]
    anonymous = httpx.get(f"{alice.base_url}/boards/vision/{name}",
                          headers={**JSON, "If-None-Match": etag})  # fmt: skip
    assert anonymous.status_code == 401
    assert "etag" not in anonymous.headers


def test_the_project_page_prefetches_the_scripts_the_board_page_loads(alice: httpx.Client) -> None:
    page = alice.get("/projects/vision", headers=HTML)
    links = re.findall(r'<link rel="prefetch" href="([^"]+)">', page.text)
    src = alice.get("/boards/vision/", headers=HTML).headers["link"].split(">")[0][1:]
    assert links[0] == f"/boards/vision/{src}"
    assert any("/chart_worker.js?_file_hash=" in link for link in links[1:])
    for link in links:
        script = alice.get(link, headers=GZIP)
        assert script.status_code == 200 and script.headers["cache-control"] == IMMUTABLE
