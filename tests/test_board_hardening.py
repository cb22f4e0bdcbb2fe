"""A board shows its own project and nothing else: symlinks out of the project get it no
board, and the projector plugin (which reads model_checkpoint_path anywhere, TensorBoard
#7119) is off unless the project opts in; boards get the hard open-file limit (#4955).
Real TensorBoard through tbhub's launcher."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Board
from tbhub.core.settings import Settings
from tbhub.domain.boards import request_board
from tbhub.domain.projects import create_project
from tbhub.storage.links import first_outside_link
from tbhub.storage.sample_logs import write_run
from tbhub.supervisor.backends.local import LocalBackend
from tbhub.supervisor.observe import probe_ready
from tbhub.supervisor.plan import Instance
from tbhub.supervisor.state import board_spec
from tests.scripts import idle_supervisor

PASSWD_LINE = "root:x:0:0"


def test_links_inside_the_project_are_fine_and_links_out_are_named(tmp_path: Path) -> None:
    project = tmp_path / "storage" / "vision"
    (project / "group" / "run-1").mkdir(parents=True)
    (project / "latest").symlink_to(project / "group" / "run-1")
    assert first_outside_link(project) is None
    (tmp_path / "storage" / "other" / "run").mkdir(parents=True)
    (project / "group" / "stolen").symlink_to(tmp_path / "storage" / "other" / "run")
    assert first_outside_link(project) == (
        f"group/stolen -> {tmp_path / 'storage' / 'other' / 'run'}"
    )


def test_supervisor_stops_and_refuses_a_board_whose_project_links_out(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    with transaction(factory) as session:
        for name in ("vision", "other"):
            project = create_project(session, name=name, storage_root=settings.storage,
                                     owner=None, actor="t")  # fmt: skip
            if name == "vision":
                request_board(session, project_id=project.id, now=datetime.now(UTC))
    with idle_supervisor(factory, settings.storage, tmp_path) as (supervisor, backend):
        supervisor.reconcile_once()
        assert [i.project for i in backend.list_instances()] == ["vision"]
        (settings.storage / "vision" / "borrowed").symlink_to(settings.storage / "other")
        supervisor._links.clear()  # as if LINK_CHECK_SECONDS had passed
        supervisor.reconcile_once()
        assert backend.list_instances() == [], "the running board is stopped"
        supervisor.reconcile_once()
        assert backend.list_instances() == [], "and no new one starts"
        with factory() as session:
            board = session.get(Board, 1)
            assert board is not None and board.observed_state == "failed"
            assert "the symlink borrowed -> " in (board.last_error or "")


PROJECTOR_CONFIG = """\
model_checkpoint_path: "/etc/passwd"
embeddings {
  tensor_name: "stolen"
  tensor_path: "%s"
  metadata_path: "/etc/passwd"
}
"""


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    backend = LocalBackend(state_dir=tmp_path / "boards", owner=str(tmp_path),
                           tensorboard_bin=None, stop_grace=2)  # fmt: skip
    yield backend
    for instance in backend.list_instances():
        backend.stop(instance)


def ready_board(backend: LocalBackend) -> Instance:
    deadline = time.monotonic() + 90
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            for instance in backend.list_instances():
                if probe_ready(instance, client):
                    return instance
            time.sleep(0.1)
    raise AssertionError("the board did not get ready")


def test_projector_is_off_by_default_and_a_project_can_opt_back_in(
    backend: LocalBackend, tmp_path: Path
) -> None:
    storage = tmp_path / "storage"
    write_run(storage / "vision" / "run", steps=5, tags=1)
    secret = storage / "other" / "run" / "secret.tsv"
    secret.parent.mkdir(parents=True)
    secret.write_text("another project's data\n")
    (storage / "vision" / "run" / "projector_config.pbtxt").write_text(PROJECTOR_CONFIG % secret)
    projector_urls = [
        "data/plugin/projector/runs",
        "data/plugin/projector/info?run=run",
        "data/plugin/projector/metadata?run=run&name=stolen",
        "data/plugin/projector/tensor?run=run&name=stolen",
        "data/plugins_listing",
        "data/runs",
        "data/environment",
    ]
    spec = board_spec("vision", str(storage))

    def answers(instance: Instance) -> dict[str, httpx.Response]:
        base = f"http://{instance.upstream}/boards/vision/"
        with httpx.Client(timeout=10) as client:
            return {url: client.get(base + url) for url in projector_urls}

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        backend.start(spec)  # inherits the low soft limit of this process
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    board = ready_board(backend)
    state = backend._read_state(board.instance_id)
    assert state is not None
    assert psutil.Process(state.pid).rlimit(psutil.RLIMIT_NOFILE) == (hard, hard), (
        "the launcher raises the soft open-file limit to the hard one (TensorBoard #4955)"
    )
    off = answers(board)
    assert off["data/plugin/projector/runs"].status_code == 404
    assert "projector" not in off["data/plugins_listing"].json()
    for url, response in off.items():
        assert PASSWD_LINE not in response.text, url
        assert "another project's data" not in response.text, url
    for instance in backend.list_instances():
        backend.stop(instance)

    backend.start(replace(spec, plugins=("projector",)))
    board = ready_board(backend)
    on = answers(board)
    assert "projector" in on["data/plugins_listing"].json(), "opted in: the plugin loads"
    assert on["data/plugin/projector/runs"].status_code == 200
    for url, response in on.items():
        assert PASSWD_LINE not in response.text, url
        assert "another project's data" not in response.text, url
    state = backend._read_state(board.instance_id)
    assert state is not None
    status = Path(f"/proc/{state.pid}/status").read_text()
    assert "NoNewPrivs:\t1" in status, "the board confined itself (Landlock) before loading it"
    # Confined, it still reads its runs (its data server's port file is in its own TMPDIR).
    tags_url = f"http://{board.upstream}/boards/vision/data/plugin/scalars/tags"
    deadline = time.monotonic() + 60
    with httpx.Client(timeout=10) as client:
        while not (tags := client.get(tags_url)).is_success or not tags.json():
            assert time.monotonic() < deadline, f"the confined board read no run: {tags.text}"
            time.sleep(0.5)
    assert "run" in tags.json()


CONFINED = """
import json, os, sys
from tensorboard.plugins.projector import projector_plugin
from tbhub.supervisor.board_process import confine_or_disable
left_out = confine_or_disable(["--logdir", sys.argv[1]])
import fractions  # Python's own modules still load
seen = {}
for path in sys.argv[2:]:
    try:
        seen[path] = projector_plugin._read_tensor_tsv_file(path).tolist()
    except PermissionError:
        seen[path] = "denied"
print(json.dumps({"left_out": sorted(left_out), "seen": seen}))
"""


def confined_reads(*paths: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    """What TensorBoard's projector reads of `paths` in a process confined to `paths[0]`'s
    directory as a board is (a fresh interpreter: Landlock cannot be undone)."""
    import json
    import os
    import subprocess
    import sys

    logdir = paths[0].parent
    done = subprocess.run(
        [sys.executable, "-c", CONFINED, str(logdir), *map(str, paths[1:])],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    result["stderr"] = done.stderr
    return result


def test_a_confined_board_reads_its_logdir_and_nothing_of_other_projects_or_etc(
    tmp_path: Path,
) -> None:
    """The kernel holds a board that loads the projector to its logdir (Landlock): whatever
    a `projector_config.pbtxt` names, and whatever TensorBoard's own path check lets by
    (a directory swapped for a symlink after it, #7119), nothing else opens."""
    vision = tmp_path / "storage" / "vision" / "run"
    vision.mkdir(parents=True)
    (vision / "tensors.tsv").write_text("1\t2\n3\t4\n")
    secret = tmp_path / "storage" / "other" / "run" / "secret.tsv"
    secret.parent.mkdir(parents=True)
    secret.write_text("5\t6\n")
    result = confined_reads(vision / "anchor", vision / "tensors.tsv", secret, Path("/etc/passwd"))
    assert result["left_out"] == []
    seen = result["seen"]
    assert isinstance(seen, dict)
    assert seen[str(vision / "tensors.tsv")] == [[1.0, 2.0], [3.0, 4.0]]
    assert seen[str(secret)] == "denied"
    assert seen["/etc/passwd"] == "denied"


def test_a_container_board_is_held_by_its_mounts_and_not_confined_again(tmp_path: Path) -> None:
    """Inside a container (TBHUB_BOARD_CONTAINED=mounts) only the project is mounted: the
    launcher leaves the process as it is, and everything the container sees stays readable."""
    (tmp_path / "run").mkdir()
    outside = tmp_path / "outside.tsv"
    outside.write_text("1\t2\n")
    result = confined_reads(
        tmp_path / "run" / "anchor", outside, env={"TBHUB_BOARD_CONTAINED": "mounts"}
    )
    assert result["left_out"] == []
    seen = result["seen"]
    assert isinstance(seen, dict) and seen[str(outside)] == [[1.0, 2.0]]
