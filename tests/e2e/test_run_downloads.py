"""Downloading a run's files through the real nginx and `tbhub serve`: a multi-MiB file
byte for byte, a range, and `tbhub runs download` with its resume."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.e2e.jobs_hub import Hub

pytestmark = pytest.mark.e2e
BIG = 9 * (1 << 20) + 4321  # several of the server's 4 MiB reads, and a ragged end


@pytest.fixture(scope="module")
def big_file(hub: Hub) -> tuple[int, bytes]:
    """A run of vision holding ckpt/model.pt of BIG random bytes; (run id, the bytes)."""
    made = hub.api(hub.write_token).post("/api/v1/projects/vision/runs", json={"name": "ckpt"})
    assert made.status_code == 201, made.text
    body = os.urandom(BIG)
    (Path(made.json()["logdir"]) / "ckpt").mkdir()
    (Path(made.json()["logdir"]) / "ckpt" / "model.pt").write_bytes(body)
    return int(made.json()["id"]), body


def url(run_id: int) -> str:
    return f"/api/v1/projects/vision/runs/{run_id}/contents/ckpt/model.pt"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_multi_mib_file_arrives_byte_for_byte_through_nginx(
    hub: Hub, big_file: tuple[int, bytes]
) -> None:
    run_id, body = big_file
    with hub.api() as api:  # the read token
        head = api.head(url(run_id))
        assert head.status_code == 200 and head.headers["content-length"] == str(BIG)
        listed = api.get(f"/api/v1/projects/vision/runs/{run_id}/contents").json()["files"]
        assert {"path": "ckpt/model.pt", "bytes": BIG}.items() <= listed[0].items()
        got = api.get(url(run_id))
    assert got.status_code == 200
    assert got.headers["content-disposition"].startswith('attachment; filename="model.pt"')
    assert sha256(got.content) == sha256(body)


def test_a_range_through_nginx_gets_those_bytes(hub: Hub, big_file: tuple[int, bytes]) -> None:
    run_id, body = big_file
    first, last = 3 * (1 << 20) - 7, 5 * (1 << 20) + 11  # across the server's reads
    with hub.api() as api:
        got = api.get(url(run_id), headers={"Range": f"bytes={first}-{last}"})
        tail = api.get(url(run_id), headers={"Range": "bytes=-100"})
        past = api.get(url(run_id), headers={"Range": f"bytes={BIG}-"})
    assert got.status_code == 206 and got.content == body[first : last + 1]
    assert got.headers["content-range"] == f"bytes {first}-{last}/{BIG}"
    assert (tail.status_code, tail.content) == (206, body[-100:])
    assert past.status_code == 416 and past.headers["content-range"] == f"bytes */{BIG}"


def test_tbhub_runs_download_writes_the_file_and_says_what_it_wrote(
    hub: Hub, big_file: tuple[int, bytes], tmp_path: Path
) -> None:
    run_id, body = big_file
    out = tmp_path / "model.pt"
    done = hub.tbhub("runs", "download", str(run_id), "ckpt/model.pt", "-p", "vision",
                     "-o", str(out), "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["path"] == str(out) and report["bytes"] == BIG
    assert report["sha256"] == sha256(body) == sha256(out.read_bytes())
    assert report["resumed_from"] == 0 and report["etag"].startswith('"')
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    again = hub.tbhub("runs", "download", str(run_id), "ckpt/model.pt", "-p", "vision",
                      "-o", str(out))  # fmt: skip
    assert again.returncode == 1
    assert "already exists; remove it or choose another path with -o" in again.stderr
    human = hub.tbhub("runs", "download", str(run_id), "ckpt/model.pt", "-p", "vision",
                      "-o", str(tmp_path / "copy.pt"))  # fmt: skip
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith(f"wrote {tmp_path / 'copy.pt'} (9.0 MiB); sha256 ")


def test_an_interrupted_download_resumes_and_a_changed_file_starts_over(
    hub: Hub, big_file: tuple[int, bytes], tmp_path: Path
) -> None:
    run_id, body = big_file
    with hub.api() as api:
        etag = api.head(url(run_id)).headers["etag"]
    out = tmp_path / "model.pt"
    partial = tmp_path / "model.pt.tbhub-download"
    partial.write_bytes(body[:1234567])  # what a cut-off download left
    (tmp_path / "model.pt.tbhub-download.etag").write_text(etag + "\n")
    args = ("runs", "download", str(run_id), "ckpt/model.pt", "-p", "vision", "-o", str(out))
    resumed = hub.tbhub(*args, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["resumed_from"] == 1234567
    assert sha256(out.read_bytes()) == sha256(body)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]

    out.unlink()
    partial.write_bytes(b"x" * 1000)  # from a version the server no longer has
    (tmp_path / "model.pt.tbhub-download.etag").write_text('"0-0-0"\n')
    fresh = hub.tbhub(*args, "--json")
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["resumed_from"] == 0
    assert sha256(out.read_bytes()) == sha256(body)


def test_tbhub_runs_download_errors_say_what_to_do(
    hub: Hub, big_file: tuple[int, bytes], tmp_path: Path
) -> None:
    run_id, _ = big_file
    missing = hub.tbhub("runs", "download", str(run_id), "ckpt/nope.pt", "-p", "vision",
                        "-o", str(tmp_path / "nope"))  # fmt: skip
    assert missing.returncode == 1
    assert "has no file ckpt/nope.pt; list its files" in missing.stderr
    folder = hub.tbhub("runs", "download", str(run_id), "ckpt", "-p", "vision",
                       "-o", str(tmp_path / "ckpt"), "--json")  # fmt: skip
    assert folder.returncode == 1
    assert json.loads(folder.stdout or folder.stderr)["error"]["code"] == "invalid_input"
    assert list(tmp_path.iterdir()) == []
