"""What the board-healing fault tests share: a leaking board, load through nginx, board rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import select

from tbhub.core.models import AuditEvent, Board
from tests.e2e.harness import TbhubServer, wait_until
from tests.scripts import write_script

# A real TensorBoard that keeps the MiB a request asks for: one copy, shared with bench/.
LEAKY_BOARD = Path(__file__).resolve().parents[2] / "bench" / "leaky_board.py"

JSON = {"Accept": "application/json"}


def leaky_tensorboard(server: TbhubServer) -> Path:
    return write_script(server.data_dir.parent / "leaky-tensorboard", LEAKY_BOARD.read_text())


def board_row(server: TbhubServer, project: str = "vision") -> Board:
    from tbhub.core.models import Project

    with server.db() as session:
        row = session.scalar(
            select(Board)
            .join(Project, Project.id == Board.project_id)
            .where(Project.name == project)
        )
        assert row is not None
        session.expunge(row)
        return row


def restart_reasons(server: TbhubServer) -> list[str]:
    with server.db() as session:
        events = session.scalars(
            select(AuditEvent).where(AuditEvent.action == "board.restart").order_by(AuditEvent.id)
        ).all()
        return [str(e.detail.get("reason")) for e in events]


@dataclass
class Load:
    """Clients sending board requests through nginx in a loop; every answer is counted."""

    client: httpx.Client
    path: str
    connections: int = 8
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> Load:
        for _ in range(self.connections):
            thread = threading.Thread(target=self._drive, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _drive(self) -> None:
        with httpx.Client(
            base_url=self.client.base_url, cookies=self.client.cookies, timeout=30
        ) as client:
            while not self._stop.is_set():
                try:
                    response = client.get(self.path, headers=JSON)
                    outcome = None if response.status_code == 200 else str(response.status_code)
                except httpx.HTTPError as exc:
                    outcome = f"{type(exc).__name__}: {exc}"
                with self._lock:
                    if outcome is None:
                        self.ok += 1
                    else:
                        self.failures.append(f"{time.time():.3f} {outcome}")


def leak_past_the_limit_under_load(
    server: TbhubServer, client: httpx.Client, *, old_gone: Callable[[], bool]
) -> tuple[Board, Board]:
    """Make the serving board keep 450 MiB while clients read through nginx; wait for the
    upstream to switch and for `old_gone`. Asserts no request failed and one memory restart.
    Returns the board rows before and after."""
    old = board_row(server)
    with Load(client, "/boards/vision/data/runs") as load:
        time.sleep(1)
        leak = client.get("/boards/vision/data/environment?tbhub_test_leak_mib=450", headers=JSON)
        assert leak.status_code == 200
        wait_until(
            lambda: board_row(server).instance_id not in (None, old.instance_id),
            timeout=90,
            what="the upstream to switch to the replacement",
        )
        wait_until(old_gone, timeout=60, what="the old board to stop after draining")
        time.sleep(1)

    assert load.failures == [], f"{len(load.failures)} failed of {load.ok + len(load.failures)}"
    assert load.ok > 100, "the load really ran through the swap"
    new = board_row(server)
    assert new.observed_state == "ready" and new.upstream != old.upstream
    assert new.restarts == {"memory": 1}
    assert restart_reasons(server) == ["memory"]
    return old, new
