"""Runs written straight to the storage show up in GET /runs with the watcher polling, as it
does on NFS (how fast: bench/discovery_latency.py), and a symlink out of the project does not."""

from __future__ import annotations

import time
from collections.abc import Callable

from tbhub.storage.sample_logs import write_run
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

    def listed() -> list[str]:
        runs = api.get("/api/v1/projects/vision/runs").json()["runs"]
        return [run["path"] for run in runs]

    # The bound (docs: the poll interval + 1 s) holds right after start-up, while the
    # watcher's first full scan may still be walking, and again once it is done.
    for path in ("nfs/run-1", "nfs/run-2"):
        written = time.monotonic()
        write_run(server.storage / "vision" / path, steps=5)
        wait_until(lambda path=path: path in listed(), timeout=30, what="polling discovery")
        took = time.monotonic() - written
        assert took <= POLL + 1.0, f"{path} listed {took:.2f}s after it was written"
    time.sleep(2 * POLL)  # two more polls: the symlink out of the project stays out
    assert sorted(listed()) == ["nfs/run-1", "nfs/run-2"]
