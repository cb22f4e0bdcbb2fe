"""`tbhub serve --workers 2` on real nginx: the control plane's requests land in both
processes, a sign-out, a revoked token or a removed member in one process ends access in
the other at once, a board's readers in a worker hear it is ready when the first process's
do, no worker outlives the server, stopped or killed, and an idle worker has not loaded the
first process's libraries (numpy for TensorBoard's tensor_util, docker's HTTP stack)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tbhub.client.upload import Uploader
from tbhub.storage.sample_logs import write_project, write_run
from tests.e2e.conftest import BOTH_DATABASES
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.test_supervisor_restart import gone
from tests.forms import csrf_header, form_token
from tests.support.metrics_text import sample

SERIES = "tbhub_http_request_duration_seconds_count"
UPSTREAM = re.compile(r"^\s*server (127\.0\.0\.1:\d+);$", re.M)


def control_plane(server: TbhubServer) -> list[str]:
    """The control plane's processes, as nginx's upstream lists them: the first one first."""
    text = (server.data_dir / "nginx" / "nginx.conf").read_text()
    block = text.split("upstream tbhub_control_plane {")[1].split("}")[0]
    return UPSTREAM.findall(block)


def worker_pids(server: TbhubServer) -> list[int]:
    return [
        entry["pid"] for entry in json.loads((server.data_dir / "api-workers.json").read_text())
    ]


def direct(server: TbhubServer, through: httpx.Client, address: str) -> httpx.Client:
    """The same caller (cookies, CSRF header, token), straight to one process."""
    client = httpx.Client(base_url=f"http://{address}", cookies=through.cookies,
                          headers=through.headers, timeout=10)  # fmt: skip
    server.clients.append(client)
    return client


def alice_and_bob(server: TbhubServer) -> tuple[httpx.Client, httpx.Client]:
    """A started server's alice (owner of vision) and bob (a viewer of it), signed in."""
    alice = server.sign_in("alice", "alice-password")
    assert alice.put("/api/v1/projects/vision/members/bob", json={"role": "viewer"}).is_success
    return alice, server.sign_in("bob", "bob-password")


def alice_of_vision(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    server = make_server()
    server.add_user("alice", "alice-password")
    server.add_project("vision", owner="alice")
    return server


def two_users(make_server: Callable[..., TbhubServer]) -> TbhubServer:
    server = alice_of_vision(make_server)
    server.add_user("bob", "bob-password")
    return server


@BOTH_DATABASES
def test_a_change_in_one_worker_ends_access_in_the_other_at_once(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = two_users(make_server)
    token = server.add_token("alice", ["vision"])
    server.start("--workers", "2")
    first, second = control_plane(server)
    assert first == f"127.0.0.1:{server.api_port}"

    alice, bob = alice_and_bob(server)
    job = server.token_client(token)
    # Each caller's access cached in the second process...
    on_second = {name: direct(server, c, second) for name, c in
                 (("alice", alice), ("bob", bob), ("job", job))}  # fmt: skip
    for client in on_second.values():
        assert client.get("/api/v1/projects/vision").status_code == 200
    on_first = direct(server, alice, first)
    token_id = on_first.get("/api/v1/tokens").json()[0]["id"]

    # ...and each change made through the first: the second answers the new truth at once.
    assert on_first.delete(f"/api/v1/tokens/{token_id}").is_success
    assert on_second["job"].get("/api/v1/projects/vision").status_code == 401

    assert on_first.delete("/api/v1/projects/vision/members/bob").status_code == 204
    assert on_second["bob"].get("/api/v1/projects/vision").status_code == 404

    signed_out = on_first.post("/auth/logout", data={"csrf_token": form_token(on_first, "/")},
                               follow_redirects=False)  # fmt: skip
    assert signed_out.status_code == 303
    assert on_second["alice"].get("/api/v1/projects/vision").status_code == 401


def test_requests_spread_over_the_workers_and_none_outlives_the_server(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = alice_of_vision(make_server)
    server.start("--workers", "2")
    pids = worker_pids(server)
    assert len(pids) == 1 and not gone(pids[0])
    alice = server.sign_in("alice", "alice-password")
    csrf_header(alice)
    for _ in range(20):
        assert alice.get("/api/v1/projects/vision").status_code == 200
    # /metrics, answered by either process, counts every process's requests.
    route = {"method": "GET", "route": "/api/v1/projects/{name}"}
    for _ in range(2):
        counted = wait_until(
            lambda: sample(alice.get("/metrics").text, SERIES, **route) == 20,
            timeout=5, what="/metrics to count both processes' requests",
        )  # fmt: skip
        assert counted

    server.stop()
    assert all(gone(pid) for pid in pids), "an API worker outlived tbhub serve"
    assert not (server.data_dir / "api-workers.json").exists()
    # nginx writes its access log out as it stops: which process answered each request.
    log = (server.data_dir / "nginx" / "logs" / "nginx-access.log").read_text()
    answered = set(re.findall(r'"GET /api/v1/projects/vision HTTP/1.1" 200 .* upstream=(\S+)', log))
    assert answered == set(control_plane(server)), "nginx did not spread the requests"


def test_a_killed_server_leaves_no_worker(make_server: Callable[..., TbhubServer]) -> None:
    server = make_server()
    server.start("--workers", "3")
    pids = worker_pids(server)
    assert len(pids) == 2
    server.kill()  # SIGKILL to tbhub serve alone: no chance to stop anything
    wait_until(lambda: all(gone(pid) for pid in pids), timeout=5, what="the workers to end")


def test_a_worker_that_dies_is_started_again_on_its_port(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = alice_of_vision(make_server)
    server.start("--workers", "2")
    [pid] = worker_pids(server)
    address = control_plane(server)[1]
    alice = server.sign_in("alice", "alice-password")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: gone(pid), timeout=5, what="the killed worker to end")
    wait_until(lambda: worker_pids(server) != [pid] and not gone(worker_pids(server)[0]),
               timeout=15, what="another worker in the record")  # fmt: skip
    # The new worker answers on the killed one's port, with the callers' sessions intact.
    worker = direct(server, alice, address)
    answered = wait_until(lambda: _answers(worker), timeout=30, what="the new worker to answer")
    assert answered
    assert worker.get("/api/v1/projects/vision").status_code == 200
    assert "starting another" in server.log()
    new = worker_pids(server)
    server.stop()
    assert all(gone(p) for p in new), "the restarted worker outlived tbhub serve"


def _answers(client: httpx.Client) -> bool:
    try:
        return client.get("/healthz").status_code == 200
    except httpx.HTTPError:
        return False


def compiled_packages(pid: int) -> set[str]:
    """The installed packages whose compiled modules a process has mapped."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return set(re.findall(r"site-packages/([^/\s]+)/\S+\.so", maps))


def test_an_idle_worker_maps_neither_numpy_nor_dockers_http_stack(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.start("--workers", "2")
    [worker] = worker_pids(server)
    assert server.process is not None
    # requests' charset_normalizer comes with docker's client: the first process has it.
    assert "charset_normalizer" in compiled_packages(server.process.pid)
    assert {"numpy", "charset_normalizer"}.isdisjoint(compiled_packages(worker))


@pytest.mark.parametrize("workers", ["0", "17"])
def test_the_worker_count_is_bounded(workers: str, make_server: Callable[..., TbhubServer]) -> None:
    server = make_server()
    result = server.cli("serve", "--workers", workers, check=False)
    assert result.returncode != 0
    assert "--workers" in result.stderr


@BOTH_DATABASES
def test_an_admin_cli_change_ends_access_in_every_process_at_once(
    make_server: Callable[..., TbhubServer],
) -> None:
    # The admin CLI is not a process of the server: its committed change reaches the
    # caches the auth hook judges from, in every process, through the data dir's counters
    # (and NOTIFY on PostgreSQL), not after their lifetime.
    server = two_users(make_server)
    server.start("--workers", "2")
    alice, bob = alice_and_bob(server)
    callers = {name: [direct(server, client, address) for address in control_plane(server)]
               for name, client in (("alice", alice), ("bob", bob))}  # fmt: skip

    def hook(client: httpx.Client) -> int:
        uri = {"X-Tbhub-Original-Uri": "/boards/vision/data/runs"}
        return client.get("/_auth/board", headers=uri).status_code

    for clients in callers.values():
        for client in clients:  # each caller's access cached in both processes
            assert hook(client) == 200
    server.cli("admin", "project", "remove-member", "vision", "bob")
    assert [hook(client) for client in callers["bob"]] == [403, 403]
    server.cli("admin", "user", "disable", "alice")
    assert [hook(client) for client in callers["alice"]] == [401, 401]


def test_uploads_go_to_the_workers_and_not_to_the_first_process(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    """The first process runs the watcher and run health, which read every uploaded event
    file: nginx sends the uploads (chunks, whole files, batches, listings) to the workers,
    and the rest of the API to both. The files arrive whole, the event file readable."""
    server = alice_of_vision(make_server)
    server.start("--workers", "2")
    first, worker = control_plane(server)
    api = server.token_client(server.add_token("alice", ["vision"]))
    run = api.post("/api/v1/projects/vision/runs", json={"name": "spread"}).json()
    local = tmp_path / "run"
    write_run(local / "train", steps=50, tags=2)
    (local / "model.pt").write_bytes(os.urandom((3 << 20) + 5))
    for index in range(30):
        (local / "samples" / f"{index}.json").parent.mkdir(exist_ok=True)
        (local / "samples" / f"{index}.json").write_text(json.dumps({"step": index}))
    uploader = Uploader(api, str(run["upload_url"]), local, chunk_bytes=1 << 20, parallel=4)
    assert uploader.sync(final=True).bytes_sent > 3 << 20
    for _ in range(10):
        assert api.get("/api/v1/projects/vision").status_code == 200
    stored = server.storage / "vision" / str(run["path"])
    assert (stored / "model.pt").read_bytes() == (local / "model.pt").read_bytes()

    server.stop()  # nginx writes its access log out as it stops
    log = (server.data_dir / "nginx" / "logs" / "nginx-access.log").read_text()
    uploads = re.findall(r'"(?:GET|PATCH|PUT|POST) /api/v1/projects/vision/runs/\d+/files/'
                         r'\S* HTTP/1.1" 20\d .* upstream=(\S+)', log)  # fmt: skip
    assert len(uploads) >= 6
    assert set(uploads) == {worker}, "an upload went to the first process"
    rest = re.findall(r'"GET /api/v1/projects/vision HTTP/1.1" 200 .* upstream=(\S+)', log)
    assert set(rest) == {first, worker}, "nginx no longer spreads the rest of the API"


def test_failed_sign_ins_lock_out_as_with_one_process(
    make_server: Callable[..., TbhubServer],
) -> None:
    """Failed sign-ins are counted in the memory of the process that answers them: nginx
    sends every password sign-in to the first process, so after 5 failures from an
    address the next attempts wait (auth/throttle.py), as with one process; spread over
    two, each would have seen 3 or 4 by the 7th."""
    server = alice_of_vision(make_server)
    server.start("--workers", "2")
    client = server.client()
    form = {"username": "alice", "password": "wrong", "csrf_token": form_token(client)}
    answers = [client.post("/auth/login", data=form).status_code for _ in range(7)]
    assert answers == [401] * 5 + [429] * 2, answers


# How much later than the first process's a worker's long-poll may see a board ready. Before
# the workers heard of the supervisor's writes, they read the board again every 0.5 s, from a
# snapshot up to 1 s old.
HEARD_WITHIN_S = 0.25


def test_a_worker_hears_a_board_is_ready_when_the_first_process_does(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    projects = ("vision", "speech", "audio")
    for name in projects:
        write_project(server.add_project(name, owner="alice"), runs=1, steps=5, tags=1)
    server.start("--workers", "2")
    first, second = control_plane(server)
    alice = server.sign_in("alice", "alice-password")
    on = {address: direct(server, alice, address) for address in (first, second)}

    def ready_at(address: str, project: str) -> float:
        """When this process's long-poll on the stopped board answers `ready`."""
        answer = on[address].get(f"/api/v1/boards/{project}/state",
                                 params={"since": "board_starting", "wait": 20})  # fmt: skip
        assert answer.status_code == 200 and answer.json()["state"] == "ready", answer.text
        return time.monotonic()

    # Three boards, each stopped until both processes' readers ask for it at once.
    with ThreadPoolExecutor(2) as pool:
        for project in projects:
            heard = [pool.submit(ready_at, address, project) for address in (first, second)]
            at_first, at_worker = (future.result(timeout=30) for future in heard)
            assert at_worker - at_first < HEARD_WITHIN_S, (
                f"{project}: the worker heard {at_worker - at_first:.2f} s after the first process"
            )
