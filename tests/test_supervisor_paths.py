"""The supervisor never points a board at a logdir outside the storage root."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tbhub.boards import AccessTracker, request_board
from tbhub.db import transaction
from tbhub.projects import create_project
from tbhub.settings import Settings
from tbhub.supervisor.backends.local import LocalBackend
from tbhub.supervisor.loop import Supervisor
from tbhub.supervisor.plan import Policy
from tests.scripts import write_script

IDLE_FOREVER = "import time\ntime.sleep(600)\n"


def test_project_dir_swapped_for_a_symlink_out_of_the_root_gets_no_board(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path
) -> None:
    with transaction(factory) as session:
        safe = create_project(
            session, name="safe", storage_root=settings.storage, owner=None, actor="t"
        )
        bad = create_project(
            session, name="bad", storage_root=settings.storage, owner=None, actor="t"
        )
        for project in (safe, bad):
            request_board(session, project_id=project.id, now=datetime.now(UTC))
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(settings.storage / "bad")
    (settings.storage / "bad").symlink_to(outside)

    backend = LocalBackend(
        state_dir=tmp_path / "boards", owner=str(tmp_path),
        tensorboard_bin=str(write_script(tmp_path / "tb", IDLE_FOREVER)), stop_grace=0.2,
    )  # fmt: skip
    supervisor = Supervisor(
        factory=factory, backend=backend, tracker=AccessTracker(),
        storage_root=str(settings.storage), idle_timeout=600, interval=60,
        policy=Policy(start_timeout=60),
    )  # fmt: skip
    try:
        supervisor.reconcile_once()
        assert [i.project for i in backend.list_instances()] == ["safe"]
    finally:
        for instance in backend.list_instances():
            backend.stop(instance)
        supervisor.shutdown(stop_boards=True)
