"""The host's board memory budget with real boards: with room for two, opening a third stops
the least recently used idle one; with every board pinned, the third gets "no capacity"."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from tbhub.core.models import Board, DesiredState, Project
from tbhub.storage.sample_logs import write_project
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import JSON, board_row
from tests.e2e.test_boards import wait_for_board
from tests.e2e.test_supervisor_restart import board_groups
from tests.support.metrics_text import sample

HTML = {"Accept": "text/html,application/xhtml+xml"}


def board_pss(server: TbhubServer, project: str) -> int:
    pss = wait_until(lambda: board_row(server, project).pss_bytes, timeout=30,
                     what=f"the PSS of {project}'s board")  # fmt: skip
    assert isinstance(pss, int)
    return pss


def set_board(server: TbhubServer, project: str, **values: object) -> None:
    with server.db() as session:
        board = session.scalar(
            select(Board)
            .join(Project, Project.id == Board.project_id)
            .where(Project.name == project)
        )
        assert board is not None
        for name, value in values.items():
            setattr(board, name, value)


def read_long_ago(server: TbhubServer, project: str, minutes: int) -> None:
    """As if nobody had looked at the board for `minutes` (the reading window is 2)."""
    set_board(server, project, last_access_at=datetime.now(UTC) - timedelta(minutes=minutes))


def test_budget_stops_the_least_recently_used_idle_board_then_says_no_capacity(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    for name in ("one", "two", "three"):
        write_project(server.add_project(name, owner="alice"), runs=1, steps=10, tags=1)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "one")
    wait_for_board(alice, "two")
    # A killed serve leaves its boards and the new one adopts them, but not the old zygote:
    # once it is gone the boards share fewer pages and their PSS grows. Measure them then.
    before = {name: board_pss(server, name) for name in ("one", "two")}
    server.kill()
    server.start()
    wait_until(lambda: all(board_pss(server, n) != before[n] for n in before), timeout=30,
               what="the PSS of the adopted boards measured without the old zygote")  # fmt: skip
    pss = board_pss(server, "one") + board_pss(server, "two")
    # Room for the two boards and not for a third: restart serve with that budget.
    server.kill()
    server.env["TBHUB_BOARD_MEMORY_BUDGET"] = str(int(pss * 1.4))
    # As if three had run before at the others' size: its cost is then known. A board never
    # measured costs the median of the live ones, which jumps once a board that shared pages
    # with them stops; the estimate is covered by tests/test_plan.py.
    set_board(server, "three", pss_bytes=pss // 2)
    server.start()
    read_long_ago(server, "one", minutes=10)
    read_long_ago(server, "two", minutes=5)
    alice = server.sign_in("alice", "alice-password")

    wait_for_board(alice, "three")
    assert board_row(server, "one").desired_state == DesiredState.stopped, "least recently used"
    assert board_row(server, "two").desired_state == DesiredState.running
    projects = {g.split("-")[0] for g in board_groups(server)}
    assert projects == {"two", "three"}
    with server.db() as session:
        from tbhub.core.models import AuditEvent

        evictions = session.scalars(select(AuditEvent.target).where(
            AuditEvent.action == "board.evict")).all()  # fmt: skip
    assert evictions == ["one"]

    # Every live board pinned: nothing can make room for "one".
    for name in ("two", "three"):
        server.cli("admin", "board", "pin", name)
    xhr = alice.get("/boards/one/data/runs", headers=JSON)
    wait_until(lambda: board_row(server, "one").observed_state == "no_capacity", timeout=30,
               what="the no-capacity state")  # fmt: skip
    xhr = wait_until(
        lambda: (r := alice.get("/boards/one/data/runs", headers=JSON)).status_code == 503
        and r.json()["error"]["code"] == "no_capacity" and r,
        timeout=10, what="the no-capacity answer",
    )  # fmt: skip
    assert xhr.headers["retry-after"] == "30"  # type: ignore[attr-defined]
    assert "no capacity right now" in xhr.json()["error"]["message"]  # type: ignore[attr-defined]
    page = alice.get("/boards/one/", headers=HTML)
    assert page.status_code == 503 and 'data-tbhub="board-no-capacity"' in page.text
    assert "memory budget" in page.text
    [row] = [r for r in json.loads(server.cli("admin", "board", "list", "--json").stdout)
             if r["project"] == "one"]  # fmt: skip
    assert row["observed"] == "no_capacity" and row["status_note"].startswith("no capacity")
    metrics = server.client().get("/metrics").text
    assert sample(metrics, "tbhub_boards", state="no_capacity") == 1
    assert {g.split("-")[0] for g in board_groups(server)} == {"two", "three"}
