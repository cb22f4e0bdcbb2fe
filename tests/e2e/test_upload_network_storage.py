"""Uploads into a project whose storage is a real network filesystem (sshfs from a private
sshd on loopback, tests/support/sshfs.py) through a real `tbhub serve`, the mount then
dropped or hung: every upload request answers 503 `storage_unavailable` in the one error
shape, never a 500 and never a request held with the mount, and once the mount is back the
upload resumes where it stopped and ends byte for byte."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tbhub.core.models import RetentionOverride
from tbhub.core.upload_protocol import BATCH_TYPE, content_digest, pack_batch
from tbhub.domain.projects import get_project
from tbhub.storage.reach import DEFAULT_WAIT
from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TBHUB, TbhubServer, wait_until
from tests.support.sshfs import SshfsMount, skip_without_sshfs, sshfs_mount

pytestmark = pytest.mark.e2e
CHUNK_LIMIT = 1 << 20
SHARED = 1000  # bytes on the mount below the quota project
QUOTA_FILE = 5000
QUOTA = SHARED + QUOTA_FILE


@pytest.fixture(autouse=True)
def _needs_sshfs() -> None:
    skip_without_sshfs()


@dataclass
class Site:
    server: TbhubServer
    remote: SshfsMount  # mounted at the project `remote`'s directory
    shared: SshfsMount  # mounted at `quota/shared`: inside the quota's walk, not in a run
    token: str
    api: httpx.Client

    def new_run(self, project: str, name: str) -> dict[str, object]:
        response = self.api.post(f"/api/v1/projects/{project}/runs", json={"name": name})
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]

    def put(self, url: str, data: bytes) -> httpx.Response:
        return self.api.put(url, content=data, headers={"Content-Digest": content_digest(data)})

    def patch(self, url: str, offset: int, data: bytes) -> httpx.Response:
        return self.api.patch(url, content=data, headers={
            "Upload-Offset": str(offset), "Content-Digest": content_digest(data)})  # fmt: skip

    def upload(self, local: Path, run_id: object, *extra: str) -> subprocess.CompletedProcess[str]:
        """`tbhub upload` of `local` into run `run_id` of remote, as a job would run it."""
        env = {**os.environ, "TBHUB_URL": self.server.base_url, "TBHUB_TOKEN": self.token,
               "TBHUB_CLIENT_CONFIG": str(local.parent / "client.json")}  # fmt: skip
        command = [TBHUB, "upload", str(local), "--project", "remote", "--run", str(run_id)]
        return subprocess.run([*command, *extra], env=env, capture_output=True, text=True,
                              timeout=180, stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.fixture
def site(make_server: Callable[..., TbhubServer], tmp_path: Path) -> Iterator[Site]:
    server = make_server(upload_max_chunk_bytes=str(CHUNK_LIMIT), upload_min_free_bytes="0")
    server.add_user("alice", "alice-password")
    remote_dir = server.add_project("remote", owner="alice")
    quota_dir = server.add_project("quota", owner="alice")
    with server.db() as session:
        project_id = get_project(session, name="quota").id
        session.add(RetentionOverride(project_id=project_id, max_project_bytes=QUOTA,
                                      updated_by="test"))  # fmt: skip
    with (
        sshfs_mount(tmp_path / "nfs", at=remote_dir) as remote,
        sshfs_mount(tmp_path / "nfs-shared", at=quota_dir / "shared") as shared,
    ):
        (shared.backing / "notes.bin").write_bytes(os.urandom(SHARED))
        try:
            server.start()
            token = server.add_token("alice", ["remote", "quota"])
            yield Site(server, remote, shared, token, server.token_client(token))
        finally:
            remote.resume()
            shared.resume()


def assert_unavailable(answer: httpx.Response) -> None:
    """503 in the one error shape, saying what to do next."""
    assert answer.status_code == 503, answer.text
    body = answer.json()
    assert list(body) == ["error"] and sorted(body["error"]) == ["code", "message"], body
    assert body["error"]["code"] == "storage_unavailable"
    assert "is not answering" in body["error"]["message"]
    assert "once the mount is back" in body["error"]["message"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_dropped_mount_answers_every_upload_request_503_and_the_upload_resumes_once_back(
    site: Site, tmp_path: Path
) -> None:
    run = site.new_run("remote", "far")
    url = str(run["upload_url"])
    local = tmp_path / "far"
    write_run(local, steps=400, tags=2)
    (local / "model.pt").write_bytes(os.urandom(3 * CHUNK_LIMIT + 123))
    (local / "hparams.yaml").write_text("lr: 0.1\n")
    first = (local / "model.pt").read_bytes()[:CHUNK_LIMIT]
    held = site.patch(f"{url}model.pt", 0, first)
    assert held.status_code == 200, held.text

    site.remote.drop()
    rest = (local / "model.pt").read_bytes()[CHUNK_LIMIT : 2 * CHUNK_LIMIT]
    batch = pack_batch([("hparams.yaml", b"lr: 0.1\n")])
    answers = [
        site.api.get(url),
        site.api.get(f"{url}model.pt"),
        site.patch(f"{url}model.pt", CHUNK_LIMIT, rest),
        site.put(f"{url}hparams.yaml", b"lr: 0.1\n"),
        site.api.post(url, content=batch, headers={
            "Content-Type": BATCH_TYPE, "Content-Digest": content_digest(batch)}),
    ]  # fmt: skip
    for answer in answers:
        assert_unavailable(answer)
    head = site.api.head(f"{url}model.pt")
    assert head.status_code == 503 and "Upload-Offset" not in head.headers

    # The job's uploader retries a 503, then says what to do, with no traceback.
    failed = site.upload(local, run["id"])
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "error: the storage of project remote is not answering" in failed.stderr
    assert "once the mount is back" in failed.stderr
    assert "Traceback" not in failed.stderr

    site.remote.remount()
    resumed = site.upload(local, run["id"], "--json")
    assert resumed.returncode == 0, resumed.stderr
    total = sum(path.stat().st_size for path in local.iterdir())
    assert json.loads(resumed.stdout)["bytes_sent"] == total - CHUNK_LIMIT
    stored = site.remote.backing / str(run["path"])
    assert sorted(path.name for path in stored.iterdir()) == sorted(
        path.name for path in local.iterdir()
    )  # no partial or tail file left
    for path in local.iterdir():
        assert sha256(stored / path.name) == sha256(path), path.name
    assert "unhandled error" not in site.server.log()


def test_a_hung_mount_answers_upload_requests_503_within_the_bound(site: Site) -> None:
    run = site.new_run("remote", "hung")
    url = str(run["upload_url"])
    data = os.urandom(4096)
    site.remote.hang()
    started = time.monotonic()
    assert_unavailable(site.put(f"{url}a.bin", data))
    assert_unavailable(site.api.get(f"{url}a.bin"))
    assert time.monotonic() - started < 2 * DEFAULT_WAIT + 3
    site.remote.resume()  # the calls left waiting end, and with them the fast refusals
    wait_until(lambda: site.put(f"{url}a.bin", data).status_code == 200, timeout=30,
               what="the upload once the mount answers")  # fmt: skip
    assert (site.remote.backing / str(run["path"]) / "a.bin").read_bytes() == data


def test_a_quota_walk_that_meets_a_dropped_mount_is_503_and_lets_nothing_in(site: Site) -> None:
    """The run is on the local disk; the quota's walk of the project crosses the mount."""
    run = site.new_run("quota", "local")
    url = str(run["upload_url"])
    data = os.urandom(QUOTA_FILE)
    site.shared.drop()
    assert_unavailable(site.put(f"{url}model.pt", data))
    stored = site.server.storage / "quota" / str(run["path"])
    assert list(stored.iterdir()) == []
    site.shared.remount()
    # The refused chunk left nothing counted: the project fills exactly to its quota.
    assert site.put(f"{url}model.pt", data).status_code == 200
    over = site.put(f"{url}one-more.bin", b"x")
    assert over.status_code == 507, over.text
    assert (stored / "model.pt").read_bytes() == data
