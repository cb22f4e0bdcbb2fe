"""One project's storage on a real network filesystem (sshfs from a private sshd on loopback,
mounted at the project's directory), then broken: the rest of tbhub keeps answering."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tbhub.storage.sample_logs import write_project, write_run
from tests.e2e.harness import TBHUB, TbhubServer, wait_until
from tests.ports import free_port
from tests.support.sshfs import SshfsMount, skip_without_sshfs, sshfs_mount

HTML = {"Accept": "text/html,application/xhtml+xml"}
JSON = {"Accept": "application/json"}


@pytest.fixture(autouse=True)
def _needs_sshfs() -> None:
    skip_without_sshfs()


@contextmanager
def two_projects(
    make_server: Callable[..., TbhubServer], tmp_path: Path, **settings: str
) -> Iterator[tuple[TbhubServer, SshfsMount]]:
    """alice's projects: vision on the local disk, remote on an sshfs mount at its
    directory, two runs each; the server started on them. The mount is continued (if
    hung) and unmounted before the server stops, even on failure."""
    server = make_server(**settings)
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=2, steps=20, tags=1)
    remote_dir = server.add_project("remote", owner="alice")
    with sshfs_mount(tmp_path / "nfs", at=remote_dir) as mount:
        write_project(mount.backing, runs=2, steps=20, tags=1, prefix="far")
        try:
            server.start()
            yield server, mount
        finally:
            mount.resume()


def run_ids(api: httpx.Client, project: str) -> dict[str, int]:
    response = api.get(f"/api/v1/projects/{project}/runs")
    assert response.status_code == 200, response.text
    return {run["path"]: run["id"] for run in response.json()["runs"]}


def board_runs(client: httpx.Client, project: str) -> list[str] | None:
    response = client.get(f"/boards/{project}/data/runs", headers=JSON)
    return sorted(response.json()) if response.status_code == 200 and response.json() else None


def test_ui_api_and_board_gate_answer_for_other_projects_while_one_mount_hangs(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    with two_projects(make_server, tmp_path) as (server, mount):
        alice = server.sign_in("alice", "alice-password")
        api = server.token_client(server.add_token("alice", ["vision", "remote"], scope="read"))
        wait_until(lambda: len(run_ids(api, "remote")) == 2, timeout=60, what="remote's runs")
        wait_until(lambda: board_runs(alice, "vision"), timeout=90, what="vision's board")
        vision_runs, remote_runs = run_ids(api, "vision"), run_ids(api, "remote")

        mount.hang()
        # Requests that read the hung project's files pile up beside the others, as readers
        # retrying would: each gets its bounded answer and none holds the rest up.
        slow = httpx.Client(base_url=server.base_url, timeout=60, cookies=alice.cookies)
        server.clients.append(slow)
        far = remote_runs["far-00"]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            piled = [
                pool.submit(slow.get, f"/projects/remote/runs/{far}", headers=HTML)
                for _ in range(4)
            ] + [
                pool.submit(api.get, f"/api/v1/projects/remote/runs/{far}/contents")
                for _ in range(4)
            ]

            home = alice.get("/", headers=HTML)
            assert home.status_code == 200 and "vision" in home.text and "remote" in home.text
            project_page = alice.get("/projects/vision", headers=HTML)
            assert project_page.status_code == 200
            assert all(name in project_page.text for name in ("run-00", "run-01"))
            assert run_ids(api, "vision") == vision_runs
            run_page = alice.get(f"/projects/vision/runs/{vision_runs['run-00']}", headers=HTML)
            assert run_page.status_code == 200 and "events.out.tfevents" in run_page.text
            contents = api.get(f"/api/v1/projects/vision/runs/{vision_runs['run-00']}/contents")
            assert contents.status_code == 200 and contents.json()["files"]
            # The board through nginx: every request passes the auth hook first.
            assert board_runs(alice, "vision") == ["run-00", "run-01"]
            # The hung project's registry answers from the database.
            try:
                assert run_ids(api, "remote") == remote_runs
            except Exception:
                import os
                import signal
                import time

                os.kill(server.process.pid, signal.SIGABRT)
                time.sleep(2)
                raise

            for future in piled:
                answer = future.result(timeout=120)
                if answer.request.url.path.endswith("/contents"):
                    assert answer.status_code == 503, answer.text
                    assert answer.json()["error"]["code"] == "storage_unavailable"
                else:
                    assert answer.status_code == 200
                    assert "data-storage-unavailable" in answer.text
                    assert "is not answering" in answer.text
        mount.resume()  # the files come back with the mount

        def files_listed() -> bool:
            page = alice.get(f"/projects/remote/runs/{far}", headers=HTML)
            return page.status_code == 200 and "events.out.tfevents" in page.text

        wait_until(files_listed, timeout=60, what="the resumed mount's files on the run page")


def test_polling_discovers_runs_on_the_mount_and_a_hung_mount_stalls_no_other_project(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    """The storage root is local, so the watcher's root mode is inotify; the project on the
    sshfs mount is polled all the same (inotify sees nothing another client writes). Once
    that mount hangs, runs written to the local project are still discovered."""
    with two_projects(make_server, tmp_path, watch_poll_interval="1") as (server, mount):
        api = server.token_client(server.add_token("alice", ["vision", "remote"], scope="read"))
        wait_until(lambda: len(run_ids(api, "remote")) == 2, timeout=60, what="remote's runs")
        write_run(mount.backing / "late" / "run-9", steps=5)  # on the server side of the mount
        wait_until(lambda: "late/run-9" in run_ids(api, "remote"), timeout=60,
                   what="the run written on the mount's server")  # fmt: skip
        mount.hang()  # the mount's poller blocks in its next walk
        write_run(mount.backing / "late" / "run-10", steps=5)
        for name in ("new-1", "new-2"):
            write_run(server.storage / "vision" / name, steps=5)
            wait_until(lambda name=name: name in run_ids(api, "vision"), timeout=90,
                       what=f"local run {name} while the other project's mount hangs")  # fmt: skip


def test_slow_metadata_still_discovers_runs_and_other_projects_answer(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    """Every call on the mount waits up to 0.3 s (sshfs stopped and continued in turn)."""
    with two_projects(make_server, tmp_path, watch_poll_interval="1") as (server, mount):
        alice = server.sign_in("alice", "alice-password")
        api = server.token_client(server.add_token("alice", ["vision", "remote"], scope="read"))
        wait_until(lambda: len(run_ids(api, "remote")) == 2, timeout=60, what="remote's runs")
        mount.slow(stopped=0.3, running=0.05)
        write_run(mount.backing / "slow" / "run-1", steps=5)
        wait_until(lambda: "slow/run-1" in run_ids(api, "remote"), timeout=120,
                   what="a run written on the slow mount")  # fmt: skip
        page = alice.get("/projects/vision", headers=HTML)
        assert page.status_code == 200 and "run-00" in page.text
        assert board_runs(alice, "vision") or wait_until(
            lambda: board_runs(alice, "vision"), timeout=90, what="vision's board"
        )


def board_row(server: TbhubServer, project: str) -> dict[str, object]:
    rows = json.loads(server.cli("admin", "board", "list", "--json").stdout)
    return next(row for row in rows if row["project"] == project)


def test_a_board_on_a_hung_mount_is_degraded_not_restarted_in_a_storm(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    with two_projects(make_server, tmp_path) as (server, mount):
        alice = server.sign_in("alice", "alice-password")
        wait_until(lambda: board_runs(alice, "remote"), timeout=90, what="remote's board")
        before = board_row(server, "remote")["restarts"]
        mount.hang()
        wait_until(
            lambda: str(board_row(server, "remote")["status_note"] or "").startswith("degraded:"),
            timeout=60,
            what="the hung project's board to show degraded",
        )
        row = board_row(server, "remote")
        assert "is not answering" in str(row["status_note"])
        # Many passes later (a pass a second), the board was restarted at most once.
        time.sleep(15)
        after = board_row(server, "remote")
        restarts = sum(after["restarts"].values()) - sum(before.values())  # type: ignore[union-attr]
        assert restarts <= 1, after
        assert str(after["status_note"]).startswith("degraded:")
        # The other project's board still starts and answers through the auth hook.
        assert board_runs(alice, "vision") or wait_until(
            lambda: board_runs(alice, "vision"), timeout=90, what="vision's board"
        )
        mount.resume()
        wait_until(lambda: not board_row(server, "remote")["status_note"], timeout=60,
                   what="the note to clear once the mount answers")  # fmt: skip


def test_serve_refuses_sqlite_in_a_data_dir_on_the_mount(tmp_path: Path) -> None:
    with sshfs_mount(tmp_path / "nfs") as mount:
        data_dir = mount.mountpoint / "data"
        env = {key: value for key, value in os.environ.items() if not key.startswith("TBHUB_")}
        env.update(TBHUB_DATA_DIR=str(data_dir), TBHUB_CONFIG=str(tmp_path / "absent.toml"),
                   TBHUB_STORAGE_ROOT=str(tmp_path / "storage"),
                   TBHUB_HTTP_PORT=str(free_port()), TBHUB_API_PORT=str(free_port()))  # fmt: skip
        result = subprocess.run([TBHUB, "serve"], env=env, capture_output=True, text=True,
                                timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip
        assert result.returncode != 0
        assert f"the data dir {data_dir} is on a network filesystem" in result.stderr
        assert "TBHUB_DATABASE_URL to PostgreSQL" in result.stderr
        assert not (data_dir / "tbhub.sqlite3").exists()
