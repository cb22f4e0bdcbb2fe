"""Two `tbhub serve` replicas on one PostgreSQL: one supervisor leader, a standby that takes
over from a SIGKILLed leader and adopts its board, and caches that agree within their
stated lifetimes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tbhub.auth.permissions import ACCESS_CACHE_SECONDS
from tbhub.storage.sample_logs import write_project
from tests.conftest import TEST_SECRET
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_boards import wait_for_board
from tests.e2e.test_supervisor_restart import board_groups, gone

# Replicas need PostgreSQL: the leader's lock is an advisory lock there.
pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

# The takeover the replicas promise: a standby leads this soon after the leader dies.
TAKEOVER_SECONDS = 10.0
LEADER_GAUGE = re.compile(r"^tbhub_supervisor_leader (\d)(?:\.0)?$", re.M)


def leads(server: TbhubServer) -> bool:
    """What the replica's own /metrics says (nginx serves /metrics to loopback only)."""
    text = httpx.get(f"{server.base_url}/metrics", timeout=5).text
    match = LEADER_GAUGE.search(text)
    assert match is not None, "tbhub_supervisor_leader is missing from /metrics"
    return match.group(1) == "1"


def two_replicas(make_server: Callable[..., TbhubServer], tmp_path: Path) -> list[TbhubServer]:
    """Two replicas of one installation: one database, storage, board state dir and key;
    a data dir each. The first started leads."""
    shared = {
        "storage_root": str(tmp_path / "storage"),
        "board_state_dir": str(tmp_path / "boards"),
        "secret_key": TEST_SECRET,
    }
    first, second = make_server(**shared), make_server(**shared)
    first.add_user("alice", "alice-password")
    write_project(first.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    first.start()
    second.start()
    return [first, second]


def test_a_standby_leads_after_the_leader_is_killed_and_adopts_its_board(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    leader, standby = two_replicas(make_server, tmp_path)
    assert leads(leader) and not leads(standby)

    # Opened through the standby: its hook wakes the leader, which starts the board, and the
    # standby's nginx reaches it through the upstream both read from the database.
    alice = standby.sign_in("alice", "alice-password")
    assert sorted(wait_for_board(alice, "vision").json()) == ["run-00", "run-01"]
    before = board_groups(standby)
    assert len(before) == 1
    zygote = json.loads((leader.data_dir / "zygote" / "zygote.json").read_text())["pid"]

    leader.kill()  # SIGKILL to the leader's PID alone: its boards and nginx stay up
    wait_until(lambda: leads(standby), timeout=TAKEOVER_SECONDS, what="the standby to lead")

    runs = wait_for_board(alice, "vision")
    assert sorted(runs.json()) == ["run-00", "run-01"]
    assert board_groups(standby) == before, "the live board is adopted, not started twice"
    assert gone(zygote), "the dead leader's zygote exits with it"
    status = json.loads(standby.cli("admin", "replicas", "--json").stdout)
    assert [r["leader"] for r in status["replicas"]] == [True]
    assert status["leader"].endswith(f"pid {standby.process.pid}")  # type: ignore[union-attr]

    # The new leader controls the adopted board: stopping it leaves no board process.
    stopped = alice.post("/api/v1/projects/vision/board/stop")
    assert stopped.status_code == 202, stopped.text
    wait_until(lambda: board_groups(standby) == {}, timeout=30, what="the adopted board to stop")


def test_a_leader_stopped_cleanly_leaves_its_board_to_the_standby(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    leader, standby = two_replicas(make_server, tmp_path)
    alice = standby.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    before = board_groups(standby)

    leader.stop()  # SIGTERM, as systemd does on a restart: another replica is there
    wait_until(lambda: leads(standby), timeout=TAKEOVER_SECONDS, what="the standby to lead")
    assert sorted(wait_for_board(alice, "vision").json()) == ["run-00", "run-01"]
    assert board_groups(standby) == before, "the board kept running and was adopted"


def test_the_last_replica_stopped_leaves_no_board_running(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    """The leader stopped first hands its boards to the standby; the standby stopped right
    after (most often before it took the leader lock) is the last one out and stops them."""
    leader, standby = two_replicas(make_server, tmp_path)
    wait_for_board(standby.sign_in("alice", "alice-password"), "vision")
    assert len(board_groups(standby)) == 1
    leader.stop()
    standby.stop()
    wait_until(lambda: board_groups(standby) == {}, timeout=30,
               what="every board stopped with the last replica")  # fmt: skip


def test_a_standby_honours_a_membership_removed_on_the_leader_within_the_cache_lifetime(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    leader, standby = two_replicas(make_server, tmp_path)
    leader.add_user("bob", "bob-password")
    alice = leader.sign_in("alice", "alice-password")
    added = alice.put("/api/v1/projects/vision/members/bob", json={"role": "viewer"})
    assert added.status_code == 200, added.text
    bob = standby.sign_in("bob", "bob-password")
    bob_at_leader = leader.client()
    bob_at_leader.cookies = bob.cookies  # one sign-in works on every replica (one secret key)
    assert bob_at_leader.get("/api/v1/projects/vision/runs").status_code == 200
    assert bob.get("/api/v1/projects/vision/runs").status_code == 200  # cached on the standby

    removed = alice.delete("/api/v1/projects/vision/members/bob")
    assert removed.status_code == 204, removed.text
    # The replica that made the change refuses at once (a project he cannot see is 404) ...
    assert bob_at_leader.get("/api/v1/projects/vision/runs").status_code == 404
    # ... the other when its cached role expires, ACCESS_CACHE_SECONDS after it was read
    # (before the change); one more second covers the polling.
    wait_until(
        lambda: bob.get("/api/v1/projects/vision/runs").status_code == 404,
        timeout=ACCESS_CACHE_SECONDS + 1,
        what="the standby to refuse bob",
    )
