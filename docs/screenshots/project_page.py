"""docs/screenshots/project.png: the project page of a demo instance whose runs have the
names, groups and tags a team gives them.

The browser tests save a screenshot of every page they visit (test-artifacts/screenshots/);
the README shows the key ones. Their project page holds a run named with markup on purpose
(it checks that names are escaped), so the README's picture of it is taken here instead.
From the repository root, with Debian's chromium (Playwright downloads no browser):

    PYTHONPATH=. .venv/bin/python docs/screenshots/project_page.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from tbhub.models import Role
from tbhub.projects import set_membership
from tbhub.sample_logs import write_run
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.ui import sign_in

OUT = Path(__file__).resolve().parent / "project.png"
# name, group, hparams, tags, how it ended (None: still running)
RUNS = [
    ("baseline", None, {"lr": 0.01, "optimizer": "sgd"}, ["baseline"], "finished"),
    ("resnet-50", "ablations", {"lr": 0.003, "optimizer": "adam"}, ["resnet"], "finished"),
    ("resnet-50-warmup", "ablations", {"lr": 0.003, "warmup": 500}, ["resnet"], None),
    ("vit-small", "ablations", {"lr": 0.001, "optimizer": "adamw"}, ["vit"], "failed"),
]


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tbhub-screenshot-"))
    server = TbhubServer(root, f"sqlite:///{root / 'tbhub.sqlite3'}")
    try:
        server.add_user("alice", "alice-password")
        server.add_project("vision")
        with server.db() as session:
            set_membership(session, project="vision", user="alice", role=Role.editor,
                           actor="demo")  # fmt: skip
        api = server.token_client(server.add_token("alice", ["vision"]))
        server.start()
        for index, (name, group, hparams, tags, ended) in enumerate(RUNS):
            made = api.post("/api/v1/projects/vision/runs",
                            json={"name": name, "group": group, "hparams": hparams,
                                  "tags": tags}).json()  # fmt: skip
            write_run(Path(made["logdir"]), run_index=index * 4, steps=300, tags=1)
            if ended:
                api.patch(f"/api/v1/projects/vision/runs/{made['id']}",
                          json={"status": ended}).raise_for_status()  # fmt: skip

        def measured() -> bool:
            runs = api.get("/api/v1/projects/vision/runs").json()["runs"]
            return len(runs) == len(RUNS) and all(run.get("bytes") for run in runs)

        wait_until(measured, timeout=60, what="the watcher to measure the runs")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
                sign_in(page, server.base_url, "alice", "alice-password",
                        next_path="/projects/vision")  # fmt: skip
                page.goto(f"{server.base_url}/projects/vision")
                images = page.get_by_role("img")
                expect(images).to_have_count(len(RUNS))
                for image in images.all():
                    page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                                           arg=image.element_handle())  # fmt: skip
                page.screenshot(path=str(OUT), full_page=True)
            finally:
                browser.close()
        print(f"wrote {OUT}")
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
