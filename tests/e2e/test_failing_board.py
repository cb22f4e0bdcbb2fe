"""A board that keeps crashing is retried with backoff and shown as failed, with its log."""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import select

from tbhub.core.models import Board, ObservedState
from tests.e2e.harness import TbhubServer, wait_until
from tests.scripts import write_script

CRASHING_TENSORBOARD = """\
import sys
print("fatal: cannot read logdir (simulated)", flush=True)
sys.exit(3)
"""


def test_crashing_board_is_marked_failed_with_its_last_log_lines(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    script = write_script(server.data_dir.parent / "crashing-tensorboard", CRASHING_TENSORBOARD)
    server.env["TBHUB_TENSORBOARD_BIN"] = str(script)
    server.add_user("alice", "alice-password")
    server.add_project("vision", owner="alice")
    server.start()
    alice = server.sign_in("alice", "alice-password")
    assert alice.get("/boards/vision/", headers={"Accept": "text/html"}).status_code == 200

    def board() -> Board:
        with server.db() as session:
            row = session.scalar(select(Board))
            assert row is not None
            return row

    wait_until(lambda: board().failures >= 2, timeout=30, what="two failed starts")
    failed = board()
    assert failed.observed_state == ObservedState.failed
    assert failed.last_error is not None
    assert "fatal: cannot read logdir (simulated)" in failed.last_error
    # The gate reads a board snapshot that is at most a second old. Its page and its answer
    # to TensorBoard's calls both say the board failed, and why (the board's last log line).
    wait_until(
        lambda: (
            "fatal: cannot read logdir (simulated)"
            in alice.get("/boards/vision/", headers={"Accept": "text/html"}).text
        ),
        timeout=10,
        what="the board's page to report the failure and its reason",
    )
    xhr = wait_until(
        lambda: (
            (
                answer := alice.get(
                    "/boards/vision/data/runs", headers={"Accept": "application/json"}
                )
            )
            and answer.json()["error"]["code"] == "board_failed"
            and answer
        ),
        timeout=15,
        what="TensorBoard's calls to be told the board failed",
    )
    assert "fatal: cannot read logdir (simulated)" in xhr.json()["error"]["message"]
    # Between two retries the board is briefly "starting" again; it fails every time.
    status = wait_until(
        lambda: (
            (out := server.cli("admin", "board", "status", "vision").stdout)
            and "observed: failed" in out
            and out
        ),
        timeout=15,
        what="the CLI to show the failed board",
    )
    assert "fatal: cannot read logdir (simulated)" in str(status)

    # Backoff: 1 s, 2 s, 4 s ... so four seconds bring at most two more attempts (without
    # it, a start every reconcile pass would bring four).
    before = board().failures
    time.sleep(4)
    assert board().failures - before <= 2
