"""Uploads through the real nginx and `tbhub serve`: a real writer's event files reach the
board with exactly the values written; bad paths, wrong offsets, oversized bodies and full
storage get their 4xx/5xx; an upload killed half-way resumes with only the remainder; and
runs written straight to the storage are discovered. One server for the module (SQLite
unless TBHUB_TEST_E2E_DATABASES says otherwise: uploads touch the database only for auth)."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import signal
import struct
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from tbhub.client.upload import Uploader
from tbhub.core.models import RetentionOverride
from tbhub.core.upload_protocol import content_digest, pack_batch
from tbhub.domain.projects import get_project
from tbhub.storage.sample_logs import scalar_value, write_run
from tbhub.storage.tfrecord import framed
from tests.conftest import empty_database
from tests.e2e.conftest import E2E_DATABASES
from tests.e2e.harness import TBHUB, TbhubServer, wait_until

pytestmark = pytest.mark.e2e
CHUNK_LIMIT = 1 << 20
EVENTS = "events.out.tfevents.1700000000.host.1.0"


class Site:
    def __init__(self, server: TbhubServer, token: str) -> None:
        self.server = server
        self.token = token
        self.api = server.token_client(token)

    def new_run(self, project: str, name: str) -> dict[str, object]:
        response = self.api.post(f"/api/v1/projects/{project}/runs", json={"name": name})
        assert response.status_code == 201, response.text
        return response.json()  # type: ignore[no-any-return]

    def raw(
        self, method: str, target: str, body: bytes = b"", **headers: str
    ) -> tuple[int, dict[str, str], bytes]:
        """A request sent byte for byte as given (httpx would normalise '..' away)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=30)
        try:
            connection.putrequest(method, target, skip_accept_encoding=True)
            for name, value in {"Authorization": f"Bearer {self.token}",
                                "Content-Length": str(len(body)), **headers}.items():  # fmt: skip
                connection.putheader(name, value)
            connection.endheaders(body)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()


@pytest.fixture(scope="module", params=E2E_DATABASES)
def site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("uploads")
    with ExitStack() as stack:
        url = stack.enter_context(empty_database(request.param, root))
        server = TbhubServer(
            root, url, upload_max_chunk_bytes=str(CHUNK_LIMIT), upload_min_free_bytes="0",
            watch_mode="inotify",
        )  # fmt: skip
        stack.callback(server.cleanup)
        server.add_user("alice", "alice-password-1")
        for project in ("vision", "quota", "tiny"):
            server.add_project(project, owner="alice")
        with server.db() as session:
            project_id = get_project(session, name="quota").id
            session.add(RetentionOverride(project_id=project_id, max_project_bytes=10_000,
                                          updated_by="test"))  # fmt: skip
        tiny = server.storage / "tiny"
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(tiny)], check=True)
        stack.callback(subprocess.run, ["umount", "-l", str(tiny)], check=True)
        server.start()
        yield Site(server, server.add_token("alice", ["vision", "quota", "tiny"]))


def float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def test_uploaded_event_files_reach_the_board_with_the_values_written(
    site: Site, tmp_path: Path
) -> None:
    run = site.new_run("vision", "uploaded")
    local = tmp_path / "local"
    write_run(local, run_index=3, steps=300, tags=2)
    (local / "hparams.yaml").write_text("lr: 0.1\n")
    uploader = Uploader(site.api, str(run["upload_url"]), local, chunk_bytes=64 << 10)
    report = uploader.sync(final=True)
    assert report.files == 2

    stored = site.server.storage / "vision" / str(run["path"])
    event_file = next(local.glob("events.out.tfevents.*"))
    assert (stored / event_file.name).read_bytes() == event_file.read_bytes()
    assert (stored / "hparams.yaml").read_text() == "lr: 0.1\n"
    assert not list(stored.glob(".*"))  # no partial file left behind

    browser = site.server.sign_in("alice", "alice-password-1")
    url = "/boards/vision/data/plugin/scalars/scalars"
    params = {"run": str(run["path"]), "tag": "metric/1"}

    def scalars() -> list[list[float]] | None:
        response = browser.get(url, params=params, headers={"X-Requested-With": "XMLHttpRequest"})
        return response.json() if response.status_code == 200 and response.json() else None

    points = wait_until(scalars, timeout=60, what="the board to serve the uploaded run")
    assert isinstance(points, list)
    assert [(step, value) for _t, step, value in points] == [
        (step, float32(scalar_value(3, 1, step))) for step in range(300)
    ]


@pytest.mark.parametrize(
    "path",
    [
        "../../../../../etc/passwd",
        "a/../../x",
        "/etc/passwd",
        "%2e%2e/%2e%2e/x",
        "%2E%2E%2Fx",
        "%252e%252e/x",
        "..%5c..%5cx",
        "a\\..\\b",
        "a%00b",
        "a%0ab",
        "./x",
        "a//b",
    ],
)
def test_every_path_that_could_leave_the_run_gets_400(site: Site, path: str) -> None:
    run = site.new_run("vision", "paths")
    body = b"data"
    target = f"/api/v1/projects/vision/runs/{run['id']}/files/{path}"
    status, _headers, answer = site.raw(
        "PATCH", target, body, **{"Upload-Offset": "0", "Content-Digest": content_digest(body)}
    )
    assert status == 400, (path, answer)
    if answer.startswith(b"{"):  # nginx itself refuses a few forms before tbhub sees them
        assert json.loads(answer)["error"]["code"] == "unsafe_path"
    assert list((site.server.storage / "vision" / str(run["path"])).rglob("*")) == []
    assert not (site.server.storage / "etc").exists()


def test_a_symlink_in_the_run_is_never_written_through(site: Site, tmp_path: Path) -> None:
    run = site.new_run("vision", "symlink")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"keep")
    stored = site.server.storage / "vision" / str(run["path"])
    stored.mkdir(parents=True, exist_ok=True)
    (stored / EVENTS).symlink_to(outside)
    response = site.api.patch(
        f"{run['upload_url']}{EVENTS}", content=b"x",
        headers={"Upload-Offset": "4", "Content-Digest": content_digest(b"x")},
    )  # fmt: skip
    assert response.status_code == 400
    assert outside.read_bytes() == b"keep"


def test_a_chunk_at_the_wrong_offset_gets_409_with_the_right_one(site: Site) -> None:
    run = site.new_run("vision", "offsets")
    url = f"{run['upload_url']}{EVENTS}"

    def patch(offset: int, data: bytes) -> httpx.Response:
        return site.api.patch(url, content=data, headers={
            "Upload-Offset": str(offset), "Content-Digest": content_digest(data)})  # fmt: skip

    record = framed(b"abcd")  # a whole TFRecord record: event files show only those
    end = str(len(record))
    assert patch(0, record).headers["Upload-Offset"] == end
    wrong = patch(2, b"zz")
    assert wrong.status_code == 409
    assert wrong.headers["Upload-Offset"] == end
    assert wrong.json()["error"]["code"] == "offset_mismatch"
    assert patch(0, record).status_code == 200  # an idempotent retry
    assert site.api.head(url).headers["Upload-Offset"] == end
    bad = site.api.patch(url, content=b"ef", headers={
        "Upload-Offset": end, "Content-Digest": content_digest(b"xx")})  # fmt: skip
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "checksum_mismatch")
    assert (site.server.storage / "vision" / str(run["path"]) / EVENTS).read_bytes() == record


def test_a_body_over_the_limit_gets_413_as_json(site: Site) -> None:
    run = site.new_run("vision", "large")
    data = b"x" * (CHUNK_LIMIT + 1)
    response = site.api.patch(
        f"{run['upload_url']}{EVENTS}", content=data,
        headers={"Upload-Offset": "0", "Content-Digest": content_digest(data)},
    )  # fmt: skip
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    assert not (site.server.storage / "vision" / str(run["path"]) / EVENTS).exists()


@pytest.mark.parametrize(("project", "wording"), [("quota", "retention quota"),
                                                  ("tiny", "storage is full")])  # fmt: skip
def test_a_project_over_quota_or_a_full_disk_gets_507(
    site: Site, project: str, wording: str
) -> None:
    run = site.new_run(project, "big")
    data = os.urandom(CHUNK_LIMIT - 100)
    response = site.api.patch(
        f"{run['upload_url']}{EVENTS}", content=data,
        headers={"Upload-Offset": "0", "Content-Digest": content_digest(data)},
    )  # fmt: skip
    assert response.status_code == 507
    assert wording in response.json()["error"]["message"]
    assert not (site.server.storage / project / str(run["path"]) / EVENTS).exists()


def settled_size(path: Path) -> int:
    """The size once chunks the server had fully received before the kill are written:
    the same for half a second (wait_until asks every 0.1 s)."""
    sizes = [-1]

    def quiet() -> bool:
        sizes.append(path.stat().st_size)
        return len(set(sizes[-6:])) == 1

    wait_until(quiet, timeout=30, what="the file to stop growing")
    return sizes[-1]


def upload_killed_at(
    site: Site, tmp_path: Path, local: Path, pattern: str, at_bytes: int
) -> tuple[list[str], dict[str, str], Path]:
    """`tbhub upload local` started and SIGKILLed once the server's file matching `pattern`
    (under the project) holds `at_bytes`: the command, its environment, and that file."""
    env = {**os.environ, "TBHUB_URL": site.server.base_url, "TBHUB_TOKEN": site.token,
           "TBHUB_CLIENT_CONFIG": str(tmp_path / "client.json")}  # fmt: skip
    command = [TBHUB, "upload", str(local), "--project", "vision", "--json"]
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stored: Path | None = None
    deadline = time.monotonic() + 60
    try:  # watch closely (every 2 ms): the whole upload may take well under a second
        while first.poll() is None and time.monotonic() < deadline:
            stored = stored or next((site.server.storage / "vision").glob(pattern), None)
            if stored is not None and stored.exists() and stored.stat().st_size >= at_bytes:
                first.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
    finally:
        if first.poll() is None and time.monotonic() >= deadline:
            first.kill()
        first.wait(timeout=10)
    assert stored is not None, "the upload never started"
    return command, env, stored


def test_an_upload_killed_half_way_resumes_with_only_the_remainder(
    site: Site, tmp_path: Path
) -> None:
    local = tmp_path / "big-run"
    name = "events.out.tfevents.1700000000.resume.1.0"
    local.mkdir()
    (local / name).write_bytes(os.urandom(48 << 20))
    command, env, stored = upload_killed_at(site, tmp_path, local, f"*/{name}", 4 << 20)
    held = settled_size(stored)
    assert 0 < held < 48 << 20, "the upload finished before it could be killed"

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)
    assert result["bytes_sent"] == (48 << 20) - held
    digest = hashlib.sha256((local / name).read_bytes()).hexdigest()
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == digest


def test_a_checkpoint_goes_past_the_page_cache_resumes_and_refuses_a_bad_chunk(
    site: Site, tmp_path: Path
) -> None:
    """A large non-event file's chunks (1 MiB here, the server's limit) are written with
    O_DIRECT: none of its pages but the unaligned tail's are left in the page cache. An
    upload killed half way resumes with only the remainder and ends byte for byte; a
    chunk that fails its digest is refused before anything of it is written."""
    from tests.support.page_cache import cached_pages

    local = tmp_path / "ckpt-run"
    local.mkdir()
    (local / "model.pt").write_bytes(os.urandom((24 << 20) + 1000))
    command, env, partial = upload_killed_at(
        site, tmp_path, local, "*/.model.pt.tbhub-partial", 4 << 20
    )
    held = settled_size(partial)
    assert 0 < held < 24 << 20 and held % (1 << 20) == 0, held
    assert not (partial.parent / "model.pt").exists(), "a half file under its final name"

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["bytes_sent"] == (24 << 20) + 1000 - held
    stored = partial.parent / "model.pt"
    cached = cached_pages(stored)
    assert not any(cached[: (24 << 20) // 4096]), "whole chunks went through the page cache"
    assert stored.read_bytes() == (local / "model.pt").read_bytes()

    run = site.new_run("vision", "bad-big-chunk")
    url = f"{run['upload_url']}other.pt"
    chunk = os.urandom(1 << 20)
    # The digest of other bytes: the last one flipped (a random chunk ends in any byte,
    # so one set to a fixed value was the same chunk once in 256 runs).
    other = chunk[:-1] + bytes([chunk[-1] ^ 0xFF])
    bad = site.api.patch(url, content=chunk, headers={
        "Upload-Offset": "0", "Content-Digest": content_digest(other)})  # fmt: skip
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "checksum_mismatch")
    run_dir = site.server.storage / "vision" / str(run["path"])
    assert not run_dir.exists() or list(run_dir.iterdir()) == []
    good = site.api.patch(url, content=chunk, headers={
        "Upload-Offset": "0", "Content-Digest": content_digest(chunk)})  # fmt: skip
    assert good.headers["Upload-Offset"] == str(1 << 20)


def test_a_run_written_straight_to_the_storage_is_discovered(site: Site) -> None:
    write_run(site.server.storage / "vision" / "direct" / "run-7", steps=5)

    def discovered() -> dict[str, object] | None:
        runs = site.api.get("/api/v1/projects/vision/runs", params={"status": "discovered"})
        return next((r for r in runs.json()["runs"] if r["path"] == "direct/run-7"), None)

    run = wait_until(discovered, timeout=30, what="the run in GET /runs (inotify)")
    assert isinstance(run, dict)
    event_file = next((site.server.storage / "vision" / "direct" / "run-7").iterdir())
    assert (run["source"], run["files"], run["bytes"]) == (
        "discovered",
        1,
        event_file.stat().st_size,
    )


def test_while_a_job_writes_only_whole_records_are_sent(site: Site, tmp_path: Path) -> None:
    run = site.new_run("vision", "live")
    local = tmp_path / "live"
    write_run(local, steps=50)
    event_file = next(local.glob("events.out.tfevents.*"))
    whole = event_file.stat().st_size
    with event_file.open("ab") as fh:  # the writer is half-way through its next record
        fh.write(framed(b"\0" * 100)[:30])
    uploader = Uploader(site.api, str(run["upload_url"]), local)
    uploader.sync()
    stored = site.server.storage / "vision" / str(run["path"]) / event_file.name
    assert stored.stat().st_size == whole
    uploader.sync(final=True)  # the torn record goes up too, and the server holds it back
    assert stored.read_bytes() == event_file.read_bytes()[:whole]
    assert site.api.head(f"{run['upload_url']}{event_file.name}").headers["Upload-Offset"] == str(
        event_file.stat().st_size
    )


# Runs argv[1:] with SIGINT at its default (so Python there turns it into KeyboardInterrupt).
DEFAULT_SIGINT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                  "os.execv(sys.argv[1], sys.argv[1:])")  # fmt: skip


def test_upload_watch_follows_new_data_until_interrupted(site: Site, tmp_path: Path) -> None:
    local = tmp_path / "watched"
    write_run(local / "a", steps=10)
    env = {**os.environ, "TBHUB_URL": site.server.base_url, "TBHUB_TOKEN": site.token,
           "TBHUB_CLIENT_CONFIG": str(tmp_path / "client.json")}  # fmt: skip
    # Ctrl-C as a terminal sends it: a suite started in the background by a shell runs with
    # SIGINT ignored, which its children inherit; the watcher starts with it as a terminal has it.
    command = [sys.executable, "-c", DEFAULT_SIGINT, TBHUB, "upload", str(local),
               "--project", "vision", "--watch", "--interval", "0.2", "--json"]  # fmt: skip
    watcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
    try:
        stored_root = wait_until(
            lambda: next((site.server.storage / "vision").glob("*-watched/a"), None),
            timeout=30, what="the first pass",
        )  # fmt: skip
        assert isinstance(stored_root, Path)
        write_run(local / "b", steps=10)  # new data while it watches
        wait_until(lambda: list((stored_root.parent / "b").glob("events.*")), timeout=30,
                   what="the new run's file")  # fmt: skip
        watcher.send_signal(signal.SIGINT)
        out, err = watcher.communicate(timeout=30)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.communicate()
    assert watcher.returncode == 0, err
    assert json.loads(out)["files"] >= 1
    for name in ("a", "b"):
        source = next((local / name).glob("events.*"))
        assert (stored_root.parent / name / source.name).read_bytes() == source.read_bytes()


def write_big_record_events(logdir: Path, big: int) -> Path:
    """A real event file: scalars, one record of `big` bytes (an image), more scalars."""
    writer = EventFileWriter(str(logdir), max_queue_size=1000, flush_secs=120)
    for step in range(30):
        value = Summary.Value(tag="loss", simple_value=1.0 / (step + 1))
        writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=[value])))
        if step == 10:
            image = Summary.Image(encoded_image_string=os.urandom(big))
            summary = Summary(value=[Summary.Value(tag="big", image=image)])
            writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=summary))
    writer.close()
    return next(logdir.glob("events.out.tfevents.*"))


def record_ends(path: Path) -> set[int]:
    """Where each record ends, as TensorBoard's own reader reads the file."""
    ends, pos = {0}, 0
    for record in RawEventFileLoader(str(path)).Load():
        pos += len(record) + 16
        ends.add(pos)
    return ends


class Stop(Exception):
    pass


def test_event_files_show_only_whole_records_even_with_a_record_larger_than_a_chunk(
    site: Site, tmp_path: Path
) -> None:
    """The uploader cuts chunks at record ends, and the server holds back a record larger
    than any chunk (over the server's own chunk limit here) until it is whole, so whatever
    the board reads, and wherever an upload is killed, is whole records."""
    source = write_big_record_events(tmp_path / "job", big=CHUNK_LIMIT + (CHUNK_LIMIT >> 1))
    ends = record_ends(source)
    for killed in (False, True):
        run = site.new_run("vision", "big-record")
        stored = site.server.storage / "vision" / str(run["path"]) / source.name
        seen: list[int] = []

        def after_chunk(_sent: int, _total: int, stored: Path = stored, killed: bool = killed,
                        seen: list[int] = seen) -> None:  # fmt: skip
            seen.append(stored.stat().st_size)
            if killed and len(seen) == 3:  # the job dies with the big record half sent
                raise Stop

        uploader = Uploader(site.api, str(run["upload_url"]), source.parent,
                            chunk_bytes=CHUNK_LIMIT >> 2, on_progress=after_chunk)  # fmt: skip
        if killed:
            with pytest.raises(Stop):
                uploader.sync(final=True)
        else:
            uploader.sync(final=True)
        assert len(seen) >= 3 and set(seen) <= ends, "a torn record was visible"
        assert source.read_bytes().startswith(stored.read_bytes())
        if not killed:
            assert stored.read_bytes() == source.read_bytes()


@pytest.mark.parametrize("name", ["model.bin", EVENTS])
def test_racing_whole_file_uploads_of_one_file_all_end_well(site: Site, name: str) -> None:
    same = framed(os.urandom(50_000))
    for versions in ([same] * 8, [framed(os.urandom(50_000)) for _ in range(8)]):
        run = site.new_run("vision", "race")
        url = f"{run['upload_url']}{name}"
        clients = [site.server.token_client(site.token) for _ in versions]

        def put(pair: tuple[httpx.Client, bytes], url: str = url) -> httpx.Response:
            client, data = pair
            return client.put(url, content=data, headers={"Content-Digest": content_digest(data)})

        with ThreadPoolExecutor(len(versions)) as pool:
            answers = list(pool.map(put, zip(clients, versions, strict=True)))
        stored = site.server.storage / "vision" / str(run["path"]) / name
        assert stored.read_bytes() in versions
        assert sorted(p.name for p in stored.parent.iterdir()) == [name]
        codes = [a.status_code for a in answers]
        if name == EVENTS and versions[0] != versions[1]:
            # An event file only grows: one version wins, the others learn where it ends.
            assert sorted(codes) == [200] + [409] * 7, [a.text for a in answers]
        else:
            assert codes == [200] * 8, [a.text for a in answers]


def test_every_file_name_length_is_uploaded_or_refused_with_400(site: Site) -> None:
    run = site.new_run("vision", "long-names")
    for stem in ("h", "events.out.tfevents.1."):
        for length in (240, 241, 250, 255, 256):
            name = stem + "x" * (length - len(stem))
            data = framed(name.encode())
            response = site.api.put(f"{run['upload_url']}{name}", content=data,
                                    headers={"Content-Digest": content_digest(data)})  # fmt: skip
            if length <= 240:
                assert response.status_code == 200, response.text
            else:
                assert response.status_code == 400, response.text
                error = response.json()["error"]
                assert error["code"] == "name_too_long" and "shorten it" in error["message"]


def small_tree(root: Path, count: int) -> dict[str, bytes]:
    """`count` small files of 1-20 KB in nested directories, a small event file and an
    empty file: what a run's sample, config and profile files look like."""
    files = {f"samples/{i // 50}/step-{i:04d}.json": os.urandom(1000 + 97 * i % 19_000)
             for i in range(count)}  # fmt: skip
    files["events.out.tfevents.1700000000.small.1.0"] = framed(b"a") + framed(b"b" * 3000)
    files["empty.txt"] = b""
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def counting_client(site: Site, methods: list[str]) -> httpx.Client:
    client = site.server.token_client(site.token)
    client.event_hooks["request"] = [lambda request: methods.append(request.method)]
    return client


def test_small_files_go_in_a_few_batch_requests_and_arrive_whole(
    site: Site, tmp_path: Path
) -> None:
    files = small_tree(tmp_path / "local", 300)
    run = site.new_run("vision", "batched")
    methods: list[str] = []
    with counting_client(site, methods) as client:
        report = Uploader(client, str(run["upload_url"]), tmp_path / "local").sync(final=True)
    assert (report.files, report.bytes_sent) == (len(files), sum(map(len, files.values())))
    stored = site.server.storage / "vision" / str(run["path"])
    assert {p.relative_to(stored).as_posix(): p.read_bytes()
            for p in stored.rglob("*") if p.is_file()} == files  # fmt: skip
    # 3 MiB of small files in one batch; the server takes at most 1 MiB a request here, so
    # the uploader halves its batches on the 413 until they fit: 1 + 2 + 4 requests.
    assert methods.count("POST") <= 10 and "PATCH" not in methods, methods
    listed = {f["path"]: f for f in site.api.get(str(run["upload_url"])).json()["files"]}
    assert all(listed[rel]["offset"] == len(data) for rel, data in files.items())


def test_the_largest_files_go_first_and_the_small_batches_between_the_others(
    site: Site, tmp_path: Path
) -> None:
    """A file's chunks go one after another, so the biggest ones (one a thread) start first:
    they would otherwise end the pass alone while the other threads had nothing left to do.
    The batches of small files go between the other files, not after all of them."""
    local = tmp_path / "local"
    sizes = {"a-small.bin": 300 << 10, "b-biggest.bin": 900 << 10, "c-medium.bin": 600 << 10}
    for name, size in sizes.items():
        (local / "ckpt").mkdir(parents=True, exist_ok=True)
        (local / "ckpt" / name).write_bytes(os.urandom(size))
    small_tree(local / "samples", 20)
    run = site.new_run("vision", "largest-first")
    sent: list[tuple[str, str]] = []
    with site.server.token_client(site.token) as client:
        client.event_hooks["request"] = [
            lambda request: sent.append((request.method, request.url.path.rsplit("/", 1)[-1]))
        ]
        uploader = Uploader(client, str(run["upload_url"]), local, chunk_bytes=256 << 10,
                            parallel=1)  # fmt: skip
        uploader.sync(final=True)
    firsts = [name for method, name in sent if method == "PATCH"]
    firsts = sorted(set(firsts), key=firsts.index)
    assert firsts == ["b-biggest.bin", "c-medium.bin", "a-small.bin"], sent
    posts = [i for i, (method, _) in enumerate(sent) if method == "POST"]
    medium = [i for i, (_, name) in enumerate(sent) if name == "c-medium.bin"]
    smallest = [i for i, (_, name) in enumerate(sent) if name == "a-small.bin"]
    # One thread: the biggest file alone first, then a batch after the next file.
    assert len(posts) == 1 and max(medium) < posts[0] < min(smallest), sent
    stored = site.server.storage / "vision" / str(run["path"])
    for name in sizes:
        assert (stored / "ckpt" / name).read_bytes() == (local / "ckpt" / name).read_bytes()


def test_a_batch_that_fails_its_digest_or_holds_a_bad_member_writes_nothing(
    site: Site, tmp_path: Path
) -> None:
    run = site.new_run("vision", "bad-batch")
    stored = site.server.storage / "vision" / str(run["path"])
    good = pack_batch([("a.txt", b"one"), ("b/c.txt", b"two")])
    long = pack_batch([("a.txt", b"x" * 2000)])
    link = tarfile.TarInfo("link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    symlinked = io.BytesIO()
    with tarfile.open(fileobj=symlinked, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("first.txt"), io.BytesIO(b""))
        tar.addfile(link)
    for body, digest, code in [
        (good, content_digest(b"other"), "checksum_mismatch"),
        (pack_batch([("ok.txt", b"1"), ("../escape.txt", b"2")]), None, "unsafe_path"),
        (symlinked.getvalue(), None, "bad_request"),
        (long[:1000], None, "bad_request"),  # cut inside its file
    ]:
        response = site.api.post(str(run["upload_url"]), content=body, headers={
            "Content-Type": "application/x-tar",
            "Content-Digest": digest or content_digest(body)})  # fmt: skip
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == code
        assert not stored.exists() or list(stored.rglob("*")) == []
    untyped = site.api.post(str(run["upload_url"]), content=good,
                            headers={"Content-Digest": content_digest(good)})  # fmt: skip
    assert untyped.status_code == 400 and "application/x-tar" in untyped.text


def test_a_batch_refused_for_a_file_the_server_holds_part_of_goes_file_by_file(
    site: Site, tmp_path: Path
) -> None:
    local = tmp_path / "local"
    local.mkdir()
    run = site.new_run("vision", "batch-fallback")
    uploader = Uploader(site.api, str(run["upload_url"]), local)
    uploader.sync(final=True)  # remembers that the server holds nothing
    files = small_tree(local, 40)
    events = next(rel for rel in files if "tfevents" in rel)
    first_record = framed(b"a")
    # Another uploader got the event file's first record there meanwhile.
    site.api.patch(f"{run['upload_url']}{events}", content=first_record, headers={
        "Upload-Offset": "0", "Content-Digest": content_digest(first_record)})  # fmt: skip
    uploader.sync(final=True)
    stored = site.server.storage / "vision" / str(run["path"])
    assert {p.relative_to(stored).as_posix(): p.read_bytes()
            for p in stored.rglob("*") if p.is_file()} == files  # fmt: skip


def test_an_unchanged_tree_uploaded_again_sends_nothing(site: Site, tmp_path: Path) -> None:
    small_tree(tmp_path / "local", 30)
    env = {**os.environ, "TBHUB_URL": site.server.base_url, "TBHUB_TOKEN": site.token,
           "TBHUB_CLIENT_CONFIG": str(tmp_path / "client.json")}  # fmt: skip
    command = [TBHUB, "upload", str(tmp_path / "local"), "--project", "vision", "--json"]
    runs = [subprocess.run(command, env=env, capture_output=True, text=True, check=True,
                           timeout=120) for _ in range(2)]  # fmt: skip
    sent = [json.loads(done.stdout) for done in runs]
    assert sent[0]["run"] == sent[1]["run"]
    assert sent[0]["bytes_sent"] > 0 and sent[1]["bytes_sent"] == 0
