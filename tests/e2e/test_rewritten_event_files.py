"""An event file that a running board read as zeros (NFS shows a file's length before its
data) and that is then filled in place is never read by TensorBoard's data server until the
board restarts (BadLengthCrc marks it dead). The storage watcher sees the rewrite and has the
board replaced blue/green: the tag shows without anyone restarting anything."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until

JSON = {"Accept": "application/json"}
BOUND = 45.0  # the watcher's flush, a replacement board's start and its first load


def tags(client: httpx.Client) -> dict[str, object]:
    response = client.get("/boards/vision/data/plugin/scalars/tags", headers=JSON)
    return response.json() if response.status_code == 200 else {}  # type: ignore[no-any-return]


def test_a_zero_filled_event_file_rewritten_in_place_is_read_without_a_manual_restart(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    project = server.add_project("vision", owner="alice")
    write_run(project / "steady", steps=5, tags=1)
    write_run(tmp_path / "real", steps=20, tags=2)  # the bytes the job will have written
    [real] = list((tmp_path / "real").iterdir())
    data = real.read_bytes()
    server.start()
    server.cli("admin", "board", "set", "vision", "--reload-interval", "1")
    alice = server.sign_in("alice", "alice-password")
    alice.get("/boards/vision/")
    wait_until(lambda: "steady" in tags(alice), timeout=60, what="the board to load")
    (project / "late").mkdir()
    target = project / "late" / real.name
    target.write_bytes(bytes(len(data)))  # its length shows, its data not yet
    time.sleep(4)  # a few reloads: the data server has met the zeros and marked the file dead
    assert "late" not in tags(alice)

    with open(target, "r+b") as rewrite:  # the data arrives, in place
        rewrite.write(data)
    written = time.monotonic()
    wait_until(lambda: "late" in tags(alice), timeout=BOUND, what="the rewritten file's tags")
    assert set(tags(alice)["late"]) == {"metric/0", "metric/1"}  # type: ignore[call-overload]
    took = time.monotonic() - written
    assert "board.heal" in server.cli("admin", "audit", "list", "--json").stdout, took
