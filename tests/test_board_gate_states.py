"""What readers of a board that does not serve are told, for each way the supervisor can
leave it: starting, starting again after a failure, failed (its starts fail, or it is
refused) and no capacity. The plan's own verdicts are written to the database as the
supervisor writes them; the gate's page and its JSON (TensorBoard's XHRs) must both say the
state and the reason. Both databases."""

from __future__ import annotations

import html
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.models import Project
from tbhub.core.settings import Settings
from tbhub.domain.boards import request_board
from tbhub.supervisor.plan import BoardSpec, Desired, Instance, MiB, Policy, plan
from tbhub.supervisor.state import write_observed
from tests.test_api import seed, sign_in

HTML = {"Accept": "text/html"}
JSON = {"Accept": "application/json"}
NOW = 1000.0
SPEC = BoardSpec(project="vision", logdir="/s/vision", path_prefix="/boards/vision")
WANTED = Desired(SPEC, running=True, last_access=NOW)
CRASHED = Instance("vision-1", "vision", SPEC.fingerprint, 990.0, False, None, False)
LOG = "Traceback (most recent call last):\n  ...\nfatal: cannot read logdir (simulated)\n"
LINK = "run-x -> /storage/speech/run"

# (name, desired, instances, budget MiB, the log of the pass, code, page status, reason words)
KINDS = [
    ("starting", WANTED, [], None, None, "board_starting", 200, []),
    ("starting again after a crash", WANTED, [CRASHED], None, LOG, "board_starting", 200,
     ["fatal: cannot read logdir (simulated)"]),
    ("failed: crashed, backing off", replace(WANTED, retry_at=NOW + 30), [CRASHED], None, LOG,
     "board_failed", 503, ["fatal: cannot read logdir (simulated)"]),
    ("failed: refused for a symlink", replace(WANTED, unsafe_link=LINK), [], None, None,
     "board_failed", 503, [f"the symlink {LINK} leads outside the project", "Remove the link"]),
    ("failed: refused (compare view)", replace(WANTED, refusal="runs cannot be hard-linked"),
     [], None, None, "board_failed", 503, ["runs cannot be hard-linked"]),
    ("no capacity", replace(WANTED, last_pss=300 * MiB), [], 150, None, "no_capacity", 503,
     ["more than the whole 150 MiB", "TBHUB_BOARD_MEMORY_BUDGET"]),
]  # fmt: skip


def supervisor_pass(factory: sessionmaker[Session], desired: Desired, actual: list[Instance],
                    budget: int | None, log: str | None) -> None:  # fmt: skip
    """One reconcile pass over vision's board, its verdict written as the loop writes it."""
    policy = Policy(start_timeout=60.0, budget=budget * MiB if budget else None)
    result = plan({"vision": desired}, actual, now=NOW, policy=policy)
    errors = {"vision": log} if log else {}
    with transaction(factory) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == "vision"))
        assert project_id is not None
        request_board(session, project_id=project_id, now=datetime.now(UTC))
        write_observed(session, result, errors=errors, restarts={}, pss={},
                       now=datetime.now(UTC))  # fmt: skip


@pytest.mark.parametrize(
    ("name", "desired", "actual", "budget", "log", "code", "status", "reason"),
    KINDS,
    ids=[k[0] for k in KINDS],
)
def test_readers_of_a_board_that_does_not_serve_are_told_its_state_and_why(
    client: TestClient, factory: sessionmaker[Session], settings: Settings, name: str,
    desired: Desired, actual: list[Instance], budget: int | None, log: str | None, code: str,
    status: int, reason: list[str],
) -> None:  # fmt: skip
    seed(factory, settings)
    supervisor_pass(factory, desired, actual, budget, log)
    sign_in(client, "alice")

    xhr = client.get("/boards/vision/data/runs", headers=JSON)
    assert xhr.status_code == 503
    error = xhr.json()["error"]
    assert error["code"] == code, error
    assert all(word in error["message"] for word in reason), error["message"]
    assert int(xhr.headers["retry-after"]) >= 2

    page = client.get("/boards/vision/", headers=HTML)
    assert page.status_code == status
    assert all(word in html.unescape(page.text) for word in reason), page.text
    # The page follows the board from the state it was rendered in.
    assert f'data-state="{code}"' in page.text
    assert 'src="/static/starting.js"' in page.text


def test_readers_of_a_starting_board_do_not_wake_the_supervisor_again(
    client: TestClient, factory: sessionmaker[Session], settings: Settings
) -> None:
    """The supervisor follows a board it has started by itself: a wake-up per request of a
    reader polling it only ran full passes beside the start. A board not yet asked for, or
    not started, still wakes it."""
    seed(factory, settings)
    sign_in(client, "alice")
    context = client.app.state.context  # type: ignore[attr-defined]
    wakes: list[str] = []
    context.wake_supervisor = lambda: wakes.append("woken")

    assert client.get("/boards/vision/data/runs", headers=JSON).status_code == 503
    assert wakes == ["woken"]  # stopped: asked for, and the supervisor woken to start it

    supervisor_pass(factory, WANTED, [], None, None)  # started: observed starting
    context.boards.invalidate()
    for _ in range(3):
        assert client.get("/boards/vision/data/runs", headers=JSON).status_code == 503
    assert wakes == ["woken"]

    supervisor_pass(factory, replace(WANTED, retry_at=NOW + 30), [CRASHED], None, LOG)
    context.boards.invalidate()
    assert client.get("/boards/vision/data/runs", headers=JSON).status_code == 503
    assert wakes == ["woken", "woken"]  # failed: a reader's request wakes it again
