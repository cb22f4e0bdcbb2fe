"""/metrics reports boards: by state, PSS and limit per board, restarts by reason, budget."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Board, ObservedState, Project
from tbhub.core.settings import Settings
from tests.support.metrics_text import sample
from tests.test_api import seed, sign_in


def test_metrics_report_board_states_memory_and_restarts_by_reason(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    with transaction(factory) as session:
        rows = session.execute(
            select(Project.name, Board).join(Board, Board.project_id == Project.id)
        ).all()
        boards = {name: board for name, board in rows}
        boards["vision"].observed_state = ObservedState.ready
        boards["vision"].pss_bytes = 123456789
        boards["vision"].restarts = {"memory": 2, "crash": 1}
        boards["speech"].observed_state = ObservedState.no_capacity
        boards["speech"].restarts = {"memory": 1, "hung": 1}
    # The histogram counts for the whole process (other tests' boards too): what one start adds.
    before = client.get("/metrics").text
    client.app.state.context.board_metrics.start_latency.observe(2.5)  # type: ignore[attr-defined]
    text = client.get("/metrics").text
    assert sample(text, "tbhub_boards", state="ready") == 1
    assert sample(text, "tbhub_boards", state="no_capacity") == 1
    assert sample(text, "tbhub_boards", state="stopped") == 0
    assert sample(text, "tbhub_board_pss_bytes", project="vision") == 123456789
    assert sample(text, "tbhub_board_memory_limit_bytes", project="speech") == 2 * 1024**3
    for reason, count in (("memory", 3), ("crash", 1), ("hung", 1), ("spec", 0)):
        assert sample(text, "tbhub_board_restarts_total", reason=reason) == count
    assert sample(text, "tbhub_board_memory_budget_bytes") == settings.memory_budget_bytes
    assert sample(text, "tbhub_board_memory_used_bytes") == 123456789

    def grew(name: str, **labels: str) -> float:
        return (sample(text, name, **labels) or 0) - (sample(before, name, **labels) or 0)

    assert grew("tbhub_board_start_seconds_bucket", le="2.0") == 0
    assert grew("tbhub_board_start_seconds_bucket", le="3.0") == 1
    assert grew("tbhub_board_start_seconds_count") == 1
    assert "# TYPE tbhub_reconcile_pass_seconds histogram" in text.splitlines()


def test_hook_lets_nginx_cache_a_board_answer_except_while_it_is_swapped(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    seed(factory, settings)
    sign_in(client, "alice")

    def cache_seconds(swapping: bool) -> str:
        with transaction(factory) as session:
            board = session.get(Board, 1)
            assert board is not None
            board.observed_state, board.upstream = ObservedState.ready, "127.0.0.1:9"
            board.swapping = swapping
        time.sleep(1.1)  # the hook's board snapshot lives a second
        response = client.get(
            "/_auth/board", headers={"X-Tbhub-Original-Uri": "/boards/vision/data/runs"}
        )
        assert response.status_code == 200
        assert response.headers["x-board-upstream"] == "127.0.0.1:9"
        return response.headers["x-accel-expires"]

    assert cache_seconds(False) == "5"
    assert cache_seconds(True) == "0"
