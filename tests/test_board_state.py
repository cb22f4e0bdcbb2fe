"""GET /api/v1/boards/<project>/state, the starting page's long-poll: it answers at once when
the board's state differs from the page's, waits no longer than asked (at most 30 s) while it
does not, and answers the moment the supervisor writes the board ready or failed. Readers
only (the roles matrix, tests/api/test_roles.py, has every caller). Both databases."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.api.board_waiting import state_after
from tbhub.core.db import transaction
from tbhub.core.models import Board, DesiredState, ObservedState, Project
from tbhub.core.settings import Settings
from tbhub.domain.board_changes import BoardChanges
from tbhub.domain.boards import BoardView
from tbhub.http.deps import AppContext
from tbhub.serve.api_process import board_observed
from tests.test_api import seed, sign_in

STATE = "/api/v1/boards/vision/state"


@pytest.fixture
def alice(client: TestClient, factory: sessionmaker[Session], settings: Settings) -> TestClient:
    seed(factory, settings)
    assert sign_in(client, "alice") == 303
    return client


def context_of(client: TestClient) -> AppContext:
    context: AppContext = client.app.state.context  # type: ignore[attr-defined]
    return context


def observe(factory: sessionmaker[Session], state: ObservedState, **fields: Any) -> None:
    """Write vision's board as the supervisor would after a pass."""
    with transaction(factory) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
        board = session.get(Board, project_id)
        assert board is not None
        board.observed_state = state
        board.observed_at = datetime.now(UTC)
        for name, value in fields.items():
            setattr(board, name, value)


class Waiting:
    """A long-poll in a thread: its answer and when it came."""

    def __init__(self, client: TestClient, url: str) -> None:
        self.answer: Any = None
        self.at = 0.0
        self.thread = threading.Thread(target=self._ask, args=(client, url), daemon=True)
        self.thread.start()

    def _ask(self, client: TestClient, url: str) -> None:
        self.answer = client.get(url)
        self.at = time.monotonic()

    def join(self) -> Any:
        self.thread.join(timeout=40)
        assert not self.thread.is_alive(), "the long-poll did not answer"
        return self.answer


@pytest.fixture
def waiting_on_a_starting_board(alice: TestClient) -> Iterator[Waiting]:
    first = alice.get(STATE)  # asks for the board, as the starting page's own load does
    assert first.json()["state"] == "board_starting"
    waiting = Waiting(alice, f"{STATE}?since=board_starting&wait=20")
    time.sleep(0.3)
    assert waiting.thread.is_alive(), "the long-poll answered while the board still started"
    yield waiting
    waiting.thread.join(timeout=40)


def test_without_since_it_answers_the_state_at_once_without_caching(alice: TestClient) -> None:
    response = alice.get(STATE)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == {"project": "vision", "state": "board_starting", "reason": None,
                               "changed": True}  # fmt: skip


def test_asking_counts_as_wanting_the_board(alice: TestClient, factory: sessionmaker[Session]
                                            ) -> None:  # fmt: skip
    alice.get(STATE)
    with factory() as session:
        board = session.scalars(select(Board).join(Project).where(Project.name == "vision")).one()
        assert board.desired_state.value == "running"


def test_an_unchanged_state_is_answered_after_the_wait_asked_for(alice: TestClient) -> None:
    began = time.monotonic()
    response = alice.get(f"{STATE}?since=board_starting&wait=0.6")
    took = time.monotonic() - began
    assert response.json()["state"] == "board_starting"
    assert response.json()["changed"] is False
    assert 0.6 <= took < 5, took


@pytest.mark.parametrize("query", ["wait=31", "wait=-1", "wait=nan", "since=started",
                                   "since=" + "x" * 300])  # fmt: skip
def test_a_wait_out_of_bounds_or_an_unknown_state_is_refused(alice: TestClient, query: str
                                                             ) -> None:  # fmt: skip
    response = alice.get(f"{STATE}?{query}")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "invalid_input"


def test_it_answers_the_moment_the_supervisor_writes_the_board_ready(
    alice: TestClient, factory: sessionmaker[Session], waiting_on_a_starting_board: Waiting
) -> None:
    observe(factory, ObservedState.ready, upstream="127.0.0.1:9")
    written = time.monotonic()
    board_observed(context_of(alice))  # what the supervisor calls after writing
    answer = waiting_on_a_starting_board.join()
    assert answer.json() == {"project": "vision", "state": "ready", "reason": None,
                             "changed": True}  # fmt: skip
    # Woken, not found by a later re-read (those come every RECHECK_SECONDS, 0.5 s).
    assert waiting_on_a_starting_board.at - written < 0.4


def test_it_answers_when_the_board_failed_with_the_reason(
    alice: TestClient, factory: sessionmaker[Session], waiting_on_a_starting_board: Waiting
) -> None:
    observe(factory, ObservedState.failed, last_error="Traceback\nfatal: logdir unreadable")
    board_observed(context_of(alice))
    answer = waiting_on_a_starting_board.join()
    assert answer.json()["state"] == "board_failed"
    assert answer.json()["reason"] == "fatal: logdir unreadable"


def test_without_a_wake_up_a_standby_still_sees_the_change_on_its_next_read(
    alice: TestClient, factory: sessionmaker[Session], waiting_on_a_starting_board: Waiting
) -> None:
    # A standby replica's supervisor runs on the leader: nothing here wakes the waiter.
    observe(factory, ObservedState.ready, upstream="127.0.0.1:9")
    written = time.monotonic()
    answer = waiting_on_a_starting_board.join()
    assert answer.json()["state"] == "ready"
    assert waiting_on_a_starting_board.at - written < 5


def test_a_change_notified_while_a_waiter_read_the_board_ends_its_wait_at_once() -> None:
    """The wake-up that comes between a waiter's read of the board and its wait is not lost
    (seen once in the whole suite: an API worker's long-poll answered 0.5 s late, at its
    recheck): the waiter waits `since` the generation it read before."""

    async def waits() -> tuple[bool, bool]:
        changes = BoardChanges()
        before = changes.generation
        changes.notify()  # the supervisor wrote a change while the waiter read the board
        missed = await changes.wait(2.0, since=before)
        current = changes.generation
        quiet = await changes.wait(0.05, since=current)
        return missed, quiet

    assert asyncio.run(waits()) == (True, False)


def test_a_board_written_ready_during_the_read_is_answered_without_the_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """state_after: the supervisor writes the board ready and notifies while `look` still
    returns what it read before; the next look follows at once, not RECHECK_SECONDS later
    (made 60 s here, so a lost wake-up would run into the 10 s bound below)."""
    monkeypatch.setattr("tbhub.api.board_waiting.RECHECK_SECONDS", 60.0)
    changes = BoardChanges()
    views = [
        BoardView(DesiredState.running, ObservedState.ready, "127.0.0.1:9", 0),
        BoardView(DesiredState.running, ObservedState.starting, None, 0),
    ]

    def look() -> BoardView:
        view = views.pop()
        if view.observed == ObservedState.starting:
            changes.notify()  # written ready, after this read
        return view

    async def gone() -> bool:
        return False

    async def follow() -> tuple[str, str | None]:
        async with asyncio.timeout(10):
            return await state_after(changes, "vision", look, since="board_starting",
                                     wait=30, gone=gone)  # fmt: skip

    assert asyncio.run(follow()) == ("ready", None)
    assert views == []


def test_anonymous_and_non_members_are_refused_as_on_the_board(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    anonymous = client.get(f"{STATE}?since=board_starting&wait=5")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "not_authenticated"
    assert sign_in(client, "eve") == 303
    for project in ("vision", "no-such-project"):
        response = client.get(f"/api/v1/boards/{project}/state?since=board_starting&wait=5")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
