"""supervisor/board_assets.py's reading of a TensorBoard zip: one ETag per file (the index
page aside) from the version and the file's CRC, the index page's script as a preload, and
the stamped scripts the project page prefetches whatever its board's state, and the starting
page while it starts (answered by the control plane while the board does not serve, without
starting a stopped one; nothing else)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Board, DesiredState, ObservedState, Project
from tbhub.core.settings import Settings
from tbhub.supervisor.board_assets import (
    IMMUTABLE,
    installed_assets,
    read_assets,
    stamped_files,
    stamped_in,
)
from tests.test_api import seed, sign_in
from tests.test_board_state import observe

MIB = 1024 * 1024
INDEX = b'<html><head><style>a{}</style></head><body><tb-webapp></tb-webapp>' \
        b'<script src="index.js?_file_hash=528dec0c"></script></body></html>'  # fmt: skip


def webfiles_zip() -> str:
    from tensorboard import assets

    with assets.get_default_assets_zip_provider()() as zip_file:
        return str(zip_file.name)


def webfiles(tmp_path: Path, files: dict[str, bytes]) -> Path:
    path = tmp_path / "webfiles.zip"
    with zipfile.ZipFile(path, "w") as zip_:
        for name, content in files.items():
            zip_.writestr(name, content)
    return path


def test_each_file_but_the_index_has_an_etag_of_the_version_and_its_content(
    tmp_path: Path,
) -> None:
    files = {"index.html": INDEX, "index.js": b"x" * 10, "font-roboto/a.woff2": b"y"}
    assets = read_assets(webfiles(tmp_path, files), "2.21.0")
    assert sorted(assets.etags) == ["font-roboto/a.woff2", "index.js"]
    assert assets.etags["index.js"].startswith('"tb-2.21.0-') and assets.etags["index.js"].endswith(
        '-10"'
    )
    changed = read_assets(webfiles(tmp_path, {**files, "index.js": b"z" * 10}), "2.21.0")
    assert changed.etags["index.js"] != assets.etags["index.js"]
    upgraded = read_assets(webfiles(tmp_path, files), "2.22.0")
    assert upgraded.etags["font-roboto/a.woff2"] != assets.etags["font-roboto/a.woff2"]


def test_the_index_pages_stamped_script_becomes_a_preload(tmp_path: Path) -> None:
    assets = read_assets(webfiles(tmp_path, {"index.html": INDEX}), "2.21.0")
    assert assets.preload == "<index.js?_file_hash=528dec0c>; rel=preload; as=script"
    bare = read_assets(webfiles(tmp_path, {"index.html": b"<html></html>"}), "2.21.0")
    assert bare.preload is None


def test_the_stamped_scripts_are_the_index_pages_and_those_it_loads(tmp_path: Path) -> None:
    files = {"index.html": INDEX, "index.js": b'new Worker("chart_worker.js?_file_hash=60042af3")'}
    assert stamped_in(webfiles(tmp_path, files)) == (
        "index.js?_file_hash=528dec0c",
        "chart_worker.js?_file_hash=60042af3",
    )


def test_the_project_page_prefetches_them_whatever_the_boards_state(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    stopped = client.get("/projects/vision").text
    observe(factory, ObservedState.ready, upstream="127.0.0.1:9")
    serving = client.get("/projects/vision").text
    for page in (stopped, serving):
        for src in stamped_files():
            assert f'<link rel="prefetch" href="/boards/vision/{src}">' in page


def board_desired(factory: sessionmaker[Session]) -> DesiredState:
    with factory() as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
        board = session.get(Board, project_id)
        assert board is not None
        return board.desired_state


def test_a_stopped_boards_stamped_scripts_come_from_the_control_plane_without_starting_it(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    url = f"/boards/vision/{stamped_script()}"
    # The hook, as nginx asks it: let in, to the control plane, and the board not asked for.
    hook = client.get("/_auth/board", headers={"X-Tbhub-Original-Uri": url})
    assert hook.status_code == 200
    assert hook.headers["x-board-upstream"] == settings.api_address
    # The control plane's answer: the installed TensorBoard's script, as the board's.
    script = client.get(url, headers={"Accept-Encoding": "gzip"})
    assert script.status_code == 200 and script.headers["cache-control"] == IMMUTABLE
    assert script.headers["etag"] == installed_assets().etags["index.js"]
    assert board_desired(factory) == DesiredState.stopped
    # Anything else of the board asks for it, as before.
    assert client.get("/_auth/board", headers={"X-Tbhub-Original-Uri": "/boards/vision/data/runs"}
                      ).status_code == 200  # fmt: skip
    assert board_desired(factory) == DesiredState.running


def prerendered(client: TestClient) -> list[object]:
    """The project page's Speculation Rules, parsed."""
    page = client.get("/projects/vision").text
    return [json.loads(r) for r in re.findall(r'<script type="speculationrules">(.*?)</script>',
                                              page)]  # fmt: skip


BOARD_RULES = [
    {"prerender": [{"source": "list", "urls": ["/boards/vision/"], "eagerness": "immediate"}]}
]


def speech_board(factory: sessionmaker[Session], pss: int) -> None:
    """Another project's board serving, holding `pss` bytes."""
    with transaction(factory) as session:
        board = session.scalar(select(Board).join(Project, Project.id == Board.project_id)
                               .where(Project.name == "speech"))  # fmt: skip
        assert board is not None
        board.observed_state, board.pss_bytes = ObservedState.ready, pss


def test_the_project_page_prerenders_a_serving_board_and_a_stopped_one_that_fits_the_budget(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    settings.board_memory_budget = str(300 * MIB)
    speech_board(factory, 100 * MIB)
    # Stopped, and it fits beside the boards that run (costed as the typical board, 100
    # MiB): the page warms it. The prerender's request starts it, as a click would.
    assert prerendered(client) == BOARD_RULES
    assert board_desired(factory) == DesiredState.stopped  # the page itself starts nothing
    # Stopped, and starting it would evict another board: no prerender (its own last PSS,
    # 250 MiB, beside the 100 MiB that run passes the budget).
    observe(factory, ObservedState.stopped, pss_bytes=250 * MIB)
    assert prerendered(client) == []
    settings.board_memory_budget = "0"  # no budget: it always fits
    assert prerendered(client) == BOARD_RULES
    settings.board_memory_budget = str(300 * MIB)
    # Serving: prerendered whatever the budget (it holds its memory already).
    observe(factory, ObservedState.ready, upstream="127.0.0.1:9")
    assert prerendered(client) == BOARD_RULES
    observe(factory, ObservedState.failed, upstream=None)
    assert prerendered(client) == []  # failed: opening it shows why, nothing to warm
    observe(factory, ObservedState.ready, upstream="127.0.0.1:9")
    settings.board_prerender = False
    assert prerendered(client) == []  # turned off
    # The one inline script the page's CSP lets through: rules, no code.
    assert (
        "'inline-speculation-rules'"
        in client.get("/projects/vision").headers["content-security-policy"]
    )


def stamped_script() -> str:
    return next(src for src in stamped_files() if src.startswith("index.js?"))


def test_while_the_board_starts_the_control_plane_answers_its_stamped_scripts(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    page = client.get("/boards/vision/", headers={"Accept": "text/html"})
    assert 'data-tbhub="board-starting"' in page.text
    url = f"/boards/vision/{stamped_script()}"
    assert f'<link rel="prefetch" href="{url}">' in page.text
    script = client.get(url, headers={"Accept-Encoding": "gzip"})
    assert script.status_code == 200
    assert script.headers["content-encoding"] == "gzip"
    assert script.headers["cache-control"] == IMMUTABLE
    assert script.headers["etag"] == installed_assets().etags["index.js"]  # as the board's
    with zipfile.ZipFile(webfiles_zip()) as zip_:
        assert script.content == zip_.read("index.js")  # inflated by the client
    again = client.get(url, headers={"If-None-Match": script.headers["etag"]})
    assert again.status_code == 304 and again.content == b""


@pytest.mark.parametrize("path", ["index.js", "index.js?_file_hash=00000000",
                                  "icon_bundle.svg", "data/runs"])  # fmt: skip
def test_nothing_else_is_answered_for_a_board_that_does_not_serve(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, path: str
) -> None:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    response = client.get(f"/boards/vision/{path}", headers={"Accept": "application/json"})
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "board_starting"


def test_no_stamped_script_without_read_access(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    url = f"/boards/vision/{stamped_script()}"
    assert client.get(url, headers={"Accept": "application/json"}).status_code == 401
    assert sign_in(client, "eve") == 303
    assert client.get(url, headers={"Accept": "application/json"}).status_code == 404
