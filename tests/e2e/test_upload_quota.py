"""A project's upload quota on a real `tbhub serve` with three API processes behind nginx:
chunks sent at once, spread over the workers, never store more than the quota, and each
one refused gets a 507 that says so, with nothing of it written."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tbhub.core.models import RetentionOverride
from tbhub.core.upload_protocol import content_digest, hidden_name
from tbhub.domain.projects import get_project
from tests.e2e.harness import TbhubServer

pytestmark = pytest.mark.e2e
SENT = 24  # chunks at once, each on a connection of its own
WARM = 50  # a first small file from each connection: every worker has seen the project
CHUNK = 64 << 10
FITS = 8
QUOTA = SENT * WARM + FITS * CHUNK


def stored_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())


def test_concurrent_chunks_over_several_workers_never_store_more_than_the_quota(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server(api_workers="3")
    server.add_user("alice", "alice-password")
    server.add_project("quota", owner="alice")
    with server.db() as session:
        project_id = get_project(session, name="quota").id
        session.add(RetentionOverride(project_id=project_id, max_project_bytes=QUOTA,
                                      updated_by="test"))  # fmt: skip
    token = server.add_token("alice", ["quota"])
    server.start()
    api = server.token_client(token)
    run = api.post("/api/v1/projects/quota/runs", json={"name": "burst"}).json()
    url = str(run["upload_url"])

    def put(client: httpx.Client, name: str, data: bytes) -> httpx.Response:
        return client.put(f"{url}{name}", content=data,
                          headers={"Content-Digest": content_digest(data)})  # fmt: skip

    clients = [server.token_client(token) for _ in range(SENT)]
    warm = [f"events.out.tfevents.warm.{index}" for index in range(SENT)]
    names = [f"events.out.tfevents.{index}" for index in range(SENT)]
    with ThreadPoolExecutor(SENT) as pool:
        warmed = pool.map(put, clients, warm, [os.urandom(WARM)] * SENT)
        assert [answer.status_code for answer in warmed] == [200] * SENT
        answers = list(pool.map(put, clients, names, [os.urandom(CHUNK)] * SENT))

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
