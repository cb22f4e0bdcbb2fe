"""docs/screenshots/project.png and run.png: the project page and a run's page of a demo
instance whose runs have the names, groups, tags and notes a team gives them.

The browser tests save a screenshot of every page they visit (test-artifacts/screenshots/);
the README shows the key ones. Their project and run pages hold names and notes with markup
on purpose (they check that it is escaped), so the README's pictures of those two pages are
taken here instead.
From the repository root, with Debian's chromium (Playwright downloads no browser):

    PYTHONPATH=. .venv/bin/python docs/screenshots/project_page.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import expect, sync_playwright
from tests.e2e.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.ui import sign_in

from tbhub.core.models import Role
from tbhub.domain.projects import set_membership
from tbhub.storage.sample_logs import write_run

HERE = Path(__file__).resolve().parent
# What a job records about itself (`tbhub run` fills these in from git and the machine).
LINEAGE = {"git_commit": "4f2a9c1d7e", "git_branch": "main", "git_dirty": False,
           "dataset_version": "imagenet-2026.1", "host": "gpu-node-7",
           "command": "python train.py --lr 0.003 --warmup 500",
           "notes": "new augmentation: RandAugment n=2 m=9"}  # fmt: skip
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
        ids: dict[str, int] = {}
        for index, (name, group, hparams, tags, ended) in enumerate(RUNS):
            made = api.post("/api/v1/projects/vision/runs",
                            json={"name": name, "group": group, "hparams": hparams,
                                  "tags": tags, **LINEAGE}).json()  # fmt: skip
            ids[name] = made["id"]
            write_run(Path(made["logdir"]), run_index=index * 4, steps=2000, tags=1)
            if ended:
                metrics = {"accuracy": round(0.71 + index / 50, 3)}
                url = f"/api/v1/projects/vision/runs/{made['id']}"
                api.patch(url, json={"status": ended, "metrics": metrics}).raise_for_status()

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
                for name, path, curves in (
                    ("project", "", len(RUNS)),
                    ("run", f"/runs/{ids['resnet-50']}", 1),
                ):
                    page.goto(f"{server.base_url}/projects/vision{path}")
                    images = page.get_by_role("img")
                    expect(images).to_have_count(curves)
                    for image in images.all():
                        page.wait_for_function("img => img.complete && img.naturalWidth > 0",
                                               arg=image.element_handle())  # fmt: skip
                    page.screenshot(path=str(HERE / f"{name}.png"), full_page=True)
                    print(f"wrote {HERE / f'{name}.png'}")
            finally:
                browser.close()
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
