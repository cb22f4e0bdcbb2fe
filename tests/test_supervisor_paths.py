"""The supervisor never points a board at a logdir outside the storage root."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.settings import Settings
from tbhub.domain.boards import request_board
from tbhub.domain.projects import create_project
from tests.scripts import idle_supervisor


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

    with idle_supervisor(factory, settings.storage, tmp_path) as (supervisor, backend):
        supervisor.reconcile_once()
        assert [i.project for i in backend.list_instances()] == ["safe"]
