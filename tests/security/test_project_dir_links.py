"""A project directory that is not a real directory directly under the storage root (a
symlink to another project, a bind mount of one) reaches no other project's data: its board
is refused with the reason, no run is created through it, the watcher, retention and backup
restore never follow it, and every other project's listing still answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import UnsafePath
from tbhub.core.models import Board, Project, Role
from tbhub.core.settings import Settings
from tbhub.domain.boards import request_board
from tbhub.domain.projects import create_project, set_membership
from tbhub.domain.watcher import StorageWatcher
from tbhub.housekeeping import backup, retention
from tbhub.storage.paths import project_dir
from tbhub.storage.sample_logs import write_run
from tests.api.conftest import Team, team  # noqa: F401 - the fixture, by name
from tests.scripts import idle_supervisor
from tests.storage.test_watcher import RecordingSink


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def link_project(settings: Settings, name: str, to: str) -> None:
    """Replace `name`'s directory with a symlink to project `to`'s (relative, as `p4 -> p2`)."""
    shutil.rmtree(settings.storage / name)
    (settings.storage / name).symlink_to(to)


@pytest.fixture
def linked(factory: sessionmaker[Session], settings: Settings) -> Settings:
    """Projects `real` (one run of real event files) and `p4`, whose directory links to it."""
    with transaction(factory) as session:
        for name in ("real", "p4"):
            project = create_project(session, name=name, storage_root=settings.storage,
                                     owner=None, actor="t")  # fmt: skip
            request_board(session, project_id=project.id, now=datetime.now(UTC))
    write_run(settings.storage / "real" / "run-1", run_index=0, steps=3, tags=1)
    link_project(settings, "p4", "real")
    return settings


def test_the_board_of_a_symlinked_project_is_refused_with_the_reason(
    factory: sessionmaker[Session], linked: Settings, tmp_path: Path
) -> None:
    with idle_supervisor(factory, linked.storage, tmp_path) as (supervisor, backend):
        supervisor.reconcile_once()
        assert [i.project for i in backend.list_instances()] == ["real"]
        with factory() as session:
            board = session.scalars(
                select(Board).join(Project, Project.id == Board.project_id)
                .where(Project.name == "p4")
            ).one()  # fmt: skip
        assert board.observed_state == "failed"
        assert board.last_error is not None and "is a symlink" in board.last_error
        assert "p4" in board.last_error and "real directory" in board.last_error


@pytest.fixture
def team_p4(team: Team) -> Team:  # noqa: F811
    """The API team, plus project p4 (dave edits it, alice views it) linked to `vision`."""
    with transaction(team.client.app.state.context.factory) as session:  # type: ignore[attr-defined]
        create_project(session, name="p4", storage_root=team.settings.storage, owner=None,
                       actor="t")  # fmt: skip
        set_membership(session, project="p4", user="dave", role=Role.editor, actor="t")
        set_membership(session, project="p4", user="alice", role=Role.viewer, actor="t")
    link_project(team.settings, "p4", "vision")
    return team


def test_registering_a_run_through_a_symlinked_project_creates_nothing(team_p4: Team) -> None:
    api = team_p4
    before = tree(api.settings.storage / "vision")
    for group in (None, "g/h"):
        response = api.client.post("/api/v1/projects/p4/runs", headers=api.headers("dave"),
                                    json={"name": "x", "group": group})  # fmt: skip
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "unsafe_path"
        assert "is a symlink" in response.json()["error"]["message"]
    assert tree(api.settings.storage / "vision") == before


def test_the_listing_answers_everyone_and_marks_the_bad_project(team_p4: Team) -> None:
    api = team_p4
    for who in ("alice", "carol", "root"):
        response = api.client.get("/api/v1/projects", headers=api.headers(who))
        assert response.status_code == 200, (who, response.text)
        rows = {row["name"]: row for row in response.json()}
        assert rows["vision"]["storage_error"] is None
        if who != "carol":
            assert "is a symlink" in rows["p4"]["storage_error"]
            assert rows["p4"]["logdir"] == str(api.settings.storage / "p4")
    one = api.client.get("/api/v1/projects/p4", headers=api.headers("alice"))
    assert one.status_code == 200 and one.json()["storage_error"]


def test_a_project_cannot_be_created_over_a_symlink(
    factory: sessionmaker[Session], linked: Settings
) -> None:
    (linked.storage / "p5").symlink_to("real")
    with pytest.raises(UnsafePath), transaction(factory) as session:
        create_project(session, name="p5", storage_root=linked.storage, owner=None, actor="t")
    with factory() as session:
        assert session.scalar(select(Project).where(Project.name == "p5")) is None


@pytest.mark.parametrize("mode", ["inotify", "polling"])
def test_the_watcher_never_walks_a_symlinked_project(linked: Settings, mode: str) -> None:
    sink = RecordingSink()
    watcher = StorageWatcher(linked.storage, sink, mode=mode, poll_interval=0.3,  # type: ignore[arg-type]
                             min_gap=0.1)  # fmt: skip
    watcher.start()
    try:
        assert watcher.wait_ready(15)
        watcher.mark_dirty("p4", "run-1")
        write_run(linked.storage / "real" / "run-2", run_index=1, steps=3, tags=1)
        deadline = datetime.now(UTC).timestamp() + 15
        while sink.run("real", "run-2") is None and datetime.now(UTC).timestamp() < deadline:
            watcher.flush()
        assert sink.run("real", "run-2") is not None
        assert {project for project, _ in sink.runs} == {"real"}
    finally:
        watcher.stop()


def test_retention_skips_a_symlinked_project_and_refuses_it_by_name(
    factory: sessionmaker[Session], linked: Settings
) -> None:
    plans = retention.plan_retention(factory, linked)
    assert [p.project for p in plans] == ["real"]
    with pytest.raises(UnsafePath):
        retention.plan_retention(factory, linked, project="p4")


def test_backup_keeps_the_link_and_restore_refuses_to_write_through_it(
    factory: sessionmaker[Session], linked: Settings, tmp_path: Path
) -> None:
    linked.backup_target = str(tmp_path / "backup")
    snapshot = backup.run_backup(factory, linked, actor="t").snapshot
    copied = tmp_path / "backup" / snapshot / "p4"
    assert copied.is_symlink() and os.readlink(copied) == "real"
    before = tree(linked.storage / "real")
    (tmp_path / "backup" / snapshot / "real" / "run-1" / "extra").write_text("x")
    with pytest.raises(UnsafePath):
        backup.restore(factory, linked, snapshot=snapshot, project="p4", run=None, actor="t")
    assert tree(linked.storage / "real") == before


def test_a_bind_mount_over_a_project_directory_is_refused_a_volume_of_its_own_is_not(
    tmp_path: Path,
) -> None:
    """A mount trick (another project bind-mounted as this one) is refused; a filesystem of
    its own mounted at a project (a volume for it) holds no other project's data. In a mount
    namespace of its own, so nothing outside the test sees either mount."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a private mount namespace")
    root = tmp_path / "storage"
    for name in ("real", "p6", "p7"):
        (root / name).mkdir(parents=True)
    check = (
        "from pathlib import Path; from tbhub.storage.paths import project_problem;"
        f"root = Path({str(root)!r}); print(project_problem(root, 'p6'));"
        "print(project_problem(root, 'p7'))"
    )
    mounts = 'mount --bind "$0/real" "$0/p6" && mount -t tmpfs -o size=1m tmpfs "$0/p7"'
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f'{mounts} && exec "$1" -c "$2"', str(root), sys.executable, check],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    if done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"no mounts here: {done.stderr.strip()}")
    bind, volume = done.stdout.splitlines()
    assert "is a bind mount" in bind, done.stdout + done.stderr
    assert volume == "None"
    assert project_dir(root, "p6") == root / "p6"  # outside the namespace: a plain directory
