"""A project's upload quota on a real `tbhub serve` with three API processes behind nginx:
chunks sent at once, spread over the workers, never store more than the quota, and each
one refused gets a 507 that says so, with nothing of it written; a worker killed with a
chunk let in and not yet written gives it back without a restart of the server."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tbhub.core.models import RetentionOverride
from tbhub.core.processes import ProcessRef
from tbhub.core.upload_protocol import content_digest, hidden_name
from tbhub.domain.projects import get_project
from tbhub.storage.quota_ledger import DIR_NAME, _Record
from tests.e2e.harness import TbhubServer, wait_until
from tests.support.sshfs import skip_without_sshfs, sshfs_mount

pytestmark = pytest.mark.e2e
SENT = 24  # chunks at once, each on a connection of its own
WARM = 50  # a first small file from each connection: every worker has seen the project
CHUNK = 64 << 10
FITS = 8
QUOTA = SENT * WARM + FITS * CHUNK
TTL = 10.0  # the ledger's walk is redone once this old (QuotaLedger's default)
ATTEMPTS = 3  # chunks sent on a slowed mount until one is seen let in and not yet settled


def stored_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def set_quota(server: TbhubServer, project: str, quota: int) -> None:
    with server.db() as session:
        project_id = get_project(session, name=project).id
        session.add(RetentionOverride(project_id=project_id, max_project_bytes=quota,
                                      updated_by="test"))  # fmt: skip


def worker_refs(server: TbhubServer) -> list[ProcessRef]:
    """The API workers `tbhub serve` runs now, from its record of them."""
    entries = json.loads((server.data_dir / "api-workers.json").read_text())
    return [ProcessRef(**entry) for entry in entries]


def put(client: httpx.Client, url: str, data: bytes) -> httpx.Response:
    return client.put(url, content=data, headers={"Content-Digest": content_digest(data)})


def in_flight(ledger: Path, sent: Future[httpx.Response]) -> dict[tuple[int, float], int]:
    """The chunks in flight per process the project's ledger holds, watched every 2 ms
    until there are some or the request `sent` has been answered (then none)."""
    deadline = time.monotonic() + 60
    while not (owners := _Record.unpack(ledger.read_bytes()).in_flight) and not sent.done():
        assert time.monotonic() < deadline, "the chunk was never let in"
        time.sleep(0.002)
    return owners


def test_concurrent_chunks_over_several_workers_never_store_more_than_the_quota(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(api_workers="3")
    server.add_user("alice", "alice-password")
    server.add_project("quota", owner="alice")
    set_quota(server, "quota", QUOTA)
    token = server.add_token("alice", ["quota"])
    server.start()
    api = server.token_client(token)
    run = api.post("/api/v1/projects/quota/runs", json={"name": "burst"}).json()
    url = str(run["upload_url"])

    clients = [server.token_client(token) for _ in range(SENT)]
    warm = [f"{url}events.out.tfevents.warm.{index}" for index in range(SENT)]
    names = [f"events.out.tfevents.{index}" for index in range(SENT)]
    with ThreadPoolExecutor(SENT) as pool:
        warmed = pool.map(put, clients, warm, [os.urandom(WARM)] * SENT)
        assert [answer.status_code for answer in warmed] == [200] * SENT
        urls = [f"{url}{name}" for name in names]
        answers = list(pool.map(put, clients, urls, [os.urandom(CHUNK)] * SENT))

    stored = server.storage / "quota" / str(run["path"])
    held = stored_bytes(stored)
    assert held <= QUOTA, f"the project holds {held - QUOTA} bytes over its quota of {QUOTA}"
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] * FITS + [507] * (SENT - FITS), statuses
    for name, answer in zip(names, answers, strict=True):
        if answer.status_code == 507:
            assert "retention quota" in answer.json()["error"]["message"]
            assert not (stored / name).exists() and not (stored / hidden_name(name)).exists()
    assert held == QUOTA

    server.stop()  # nginx writes its access log out as it stops: which process answered
    log = (server.data_dir / "nginx" / "logs" / "nginx-access.log").read_text()
    answered = re.findall(r'"PUT /api/v1/projects/quota/runs/\d+/files/events\S* HTTP/1.1" '
                          r"(?:200|507) .* upstream=(\S+)", log)  # fmt: skip
    assert len(answered) == 2 * SENT
    assert len(set(answered)) >= 2, "the chunks did not spread over the workers"


def test_a_worker_killed_with_a_chunk_let_in_gives_it_back_at_the_next_walk(
    make_server: Callable[..., TbhubServer], tmp_path: Path
) -> None:
    """The project is on an sshfs mount slowed down, so a chunk's write takes a while: the
    worker that let it in (the ledger's table names it) is killed before it settles, and
    `tbhub serve` starts another. At the next walk the project's count is what the disk
    holds again: the bytes the dead worker had let in count no longer (before, they
    counted until the server started again, and the last chunk here got a 507)."""
    skip_without_sshfs()
    warm, chunk = 1000, 1 << 20
    quota = warm + (ATTEMPTS + 1) * chunk
    server = make_server(api_workers="3", upload_min_free_bytes="0")
    server.add_user("alice", "alice-password")
    project_dir = server.add_project("slow", owner="alice")
    set_quota(server, "slow", quota)
    token = server.add_token("alice", ["slow"])
    ledger = server.data_dir / DIR_NAME / "slow"
    with sshfs_mount(tmp_path / "nfs", at=project_dir) as mount:
        try:
            server.start()
            api = server.token_client(token)
            run = api.post("/api/v1/projects/slow/runs", json={"name": "r"}).json()
            url = str(run["upload_url"])
            assert put(api, f"{url}warm.bin", os.urandom(warm)).status_code == 200
            workers = {ref.pid: ref for ref in worker_refs(server)}

            mount.slow(stopped=0.3, running=0.01)
            with ThreadPoolExecutor(1) as pool:
                for attempt in range(ATTEMPTS):  # until one is seen in flight
                    sent = pool.submit(put, server.token_client(token), f"{url}big-{attempt}",
                                       os.urandom(chunk))  # fmt: skip
                    owners = in_flight(ledger, sent)
                    if owners:
                        break
                    assert sent.result().status_code == 200, sent.result().text
                seen = time.monotonic()  # after the last walk began: the next is due a ttl on
                assert owners, f"no chunk of {ATTEMPTS} was seen in flight"
                [(pid, _started)] = owners
                assert pid in workers, "a chunk let in by the first process, not a worker"
                os.kill(workers[pid].pid, signal.SIGKILL)
                assert sent.result(timeout=60).status_code >= 500  # nginx: the worker is gone
            mount.resume()
            wait_until(lambda: not workers[pid].is_alive(), timeout=10, what="the worker gone")

            def restarted() -> bool:
                refs = worker_refs(server)
                return pid not in {ref.pid for ref in refs} and all(r.is_alive() for r in refs)

            wait_until(restarted, timeout=30, what="serve to start another worker")
            sizes = [-1]

            def settled() -> bool:  # what the dead worker's last requests left has landed
                sizes.append(stored_bytes(mount.backing))
                return len(set(sizes[-10:])) == 1

            wait_until(settled, timeout=30, what="the project's bytes to settle")
            # The warm file and what landed of the chunk (all of it, if its requests were
            # on their way to sshfs when the worker died).
            fits = os.urandom(quota - sizes[-1])
            time.sleep(max(0.0, seen + TTL + 0.5 - time.monotonic()))  # a walk is due
            assert put(api, f"{url}fits.bin", fits).status_code == 200
            assert put(api, f"{url}one-more.bin", b"x").status_code == 507
            assert server.process is not None and server.process.poll() is None  # no restart
        finally:
            mount.resume()
