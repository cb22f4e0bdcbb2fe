"""Runs written straight to the storage show up in GET /runs with the watcher polling, as it
does on NFS (how fast: bench/discovery_latency.py), and a symlink out of the project does not."""

from __future__ import annotations

import time
from collections.abc import Callable

from tbhub.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until

POLL = 1.0


def test_polling_watcher_discovers_a_run_within_one_interval(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(watch_mode="polling", watch_poll_interval=str(POLL))
    server.add_user("alice", "alice-password-1")
    server.add_project("vision", owner="alice")
    server.start()
    api = server.token_client(server.add_token("alice", ["vision"]))
    outside = server.data_dir.parent / "outside"
    write_run(outside / "secret-run", steps=5)  # a run the link below would lead to
    (server.storage / "vision" / "outside-link").symlink_to(outside, True)

    write_run(server.storage / "vision" / "nfs" / "run-1", steps=5)

    def listed() -> list[str]:
        runs = api.get("/api/v1/projects/vision/runs").json()["runs"]
        return [run["path"] for run in runs]

    wait_until(lambda: "nfs/run-1" in listed(), timeout=30, what="polling discovery")
    time.sleep(2 * POLL)  # two more polls: the symlink out of the project stays out
    assert listed() == ["nfs/run-1"]
