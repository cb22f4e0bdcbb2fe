"""The supervisor marks a board it has just started ready as soon as the board answers, not
at a later pass: between passes it looks the new board up until its address is known, asks
its health probe, and writes it ready at once.

A real supervisor thread and local backend over a stand-in board (tests/support: it listens
after LISTEN_AFTER seconds, prints TensorBoard's ready line and answers 200), with the
passes that follow a starting board made rare (FAST_INTERVAL) and slow (each one after the
first reads the database SLOW_PASS seconds late): only the lookup between them, and its own
write, can tell the gate in time."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest import MonkeyPatch
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Board, ObservedState
from tbhub.core.settings import Settings
from tbhub.domain.boards import AccessTracker, request_board
from tbhub.domain.projects import create_project
from tbhub.supervisor import loop
from tbhub.supervisor.backends.local import LocalBackend
from tbhub.supervisor.plan import Policy
from tbhub.supervisor.state import read_desired
from tests.scripts import write_script
from tests.support.stand_in_board import stand_in_board

LISTEN_AFTER = 0.3
RARE_PASSES = 30.0
SLOW_PASS = 3.0


def observed(factory: sessionmaker[Session], project_id: int) -> ObservedState | None:
    with factory() as session:
        return session.scalar(select(Board.observed_state).where(Board.project_id == project_id))


def test_a_started_board_is_marked_ready_once_it_answers_not_a_pass_later(
    factory: sessionmaker[Session], settings: Settings, tmp_path: Path, monkeypatch: MonkeyPatch
) -> None:
    monkeypatch.setattr(loop, "FAST_INTERVAL", RARE_PASSES)
    passes = []

    def slow_read(*args: Any, **kwargs: Any) -> Any:
        passes.append(time.monotonic())
        if len(passes) > 1:
            time.sleep(SLOW_PASS)
        return read_desired(*args, **kwargs)

    monkeypatch.setattr(loop, "read_desired", slow_read)
    with transaction(factory) as session:
        project = create_project(
            session, name="vision", storage_root=settings.storage, owner=None, actor="t"
        )
        request_board(session, project_id=project.id, now=datetime.now(UTC))
        project_id = project.id
    board = write_script(tmp_path / "tb", stand_in_board(listen_after=LISTEN_AFTER))
    backend = LocalBackend(state_dir=tmp_path / "boards", owner=str(tmp_path),
                           tensorboard_bin=str(board), stop_grace=0.2)  # fmt: skip
    ready = threading.Event()

    def on_observed() -> None:
        if observed(factory, project_id) == ObservedState.ready:
            ready.set()

    supervisor = loop.Supervisor(
        factory=factory, backend=backend, tracker=AccessTracker(),
        storage_root=str(settings.storage), idle_timeout=600, interval=RARE_PASSES,
        policy=Policy(start_timeout=60), on_observed=on_observed,
    )  # fmt: skip
    started = time.monotonic()
    supervisor.start()
    try:
        # Before: the pass that started it saw no board yet, so the next came RARE_PASSES on;
        # then the board was written ready by the pass that followed its first probe.
        assert ready.wait(timeout=10), f"not ready: {observed(factory, project_id)}"
        assert time.monotonic() - started < LISTEN_AFTER + SLOW_PASS - 0.5
    finally:
        supervisor.shutdown(stop_boards=True)
