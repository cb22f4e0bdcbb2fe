"""Downloading a run's files (api/run_contents.py): who may, ranges by RFC 9110, and no way
out of the run: symlinks anywhere on the path, traversal, directories, FIFOs. Both
databases."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tbhub.http.file_body import CHUNK_BYTES
from tests.api.conftest import Team

RUNS = "/api/v1/projects/vision/runs"
BODY = bytes(range(256)) * 40  # 10240 bytes, every offset recognisable


def make_run(team: Team, name: str = "r") -> tuple[int, Path]:
    """A run of vision registered by root, and its directory with a few files in it."""
    made = team.client.post(RUNS, json={"name": name}, headers=team.headers("root"))
    assert made.status_code == 201, made.text
    logdir = Path(made.json()["logdir"])
    (logdir / "data.bin").write_bytes(BODY)
    (logdir / "hparams.yaml").write_text("lr: 0.1\n")
    (logdir / "ckpt").mkdir()
    (logdir / "ckpt" / "model.pt").write_bytes(b"weights")
    return int(made.json()["id"]), logdir


def share_cookie(team: Team) -> dict[str, str]:
    made = team.client.post("/api/v1/projects/vision/share-links", json={"note": "review"},
                            headers=team.headers("alice"))  # fmt: skip
    assert made.status_code == 201, made.text
    token = made.json()["url"].removeprefix("/share/")
    return {"Cookie": f"tbhub_share={token}"}


# caller -> what a download and the listing answer: a project the caller may not see is
# 404 like a missing one; a share link opens one board and is no caller of the API (401).
ROLES = {
    "alice": 200,  # owner
    "bob": 200,  # editor
    "carol": 200,  # viewer
    "root": 200,  # admin, no membership
    "bob-read": 200,  # read token
    "bob-write": 200,  # write token: an editor, so a reader too
    "eve": 404,  # signed in, not a member
    "dave-write-speech": 404,  # a token for another project
    None: 401,  # nobody
    "share link": 401,
}


def test_each_caller_downloads_a_file_only_if_it_may_read_the_run(team: Team) -> None:
    run_id, _ = make_run(team)
    got = {}
    for caller in ROLES:
        headers = share_cookie(team) if caller == "share link" else team.headers(caller)
        download = team.client.get(f"{RUNS}/{run_id}/contents/data.bin", headers=headers)
        listing = team.client.get(f"{RUNS}/{run_id}/contents", headers=headers)
        assert download.status_code == listing.status_code, caller
        got[caller] = download.status_code
        if download.is_success:
            assert download.content == BODY
            assert {"path": "data.bin", "bytes": len(BODY)}.items() <= {
                **next(f for f in listing.json()["files"] if f["path"] == "data.bin")
            }.items()
        else:
            assert set(download.json()) == {"error"}, (caller, download.text)
            assert BODY[:64] not in download.content
    assert got == ROLES


def test_the_listing_gives_each_files_size_in_bytes(team: Team) -> None:
    run_id, logdir = make_run(team)
    (logdir / ".events.out.tfevents.1.tbhub-tail").write_bytes(b"half a record")
    listing = team.client.get(f"{RUNS}/{run_id}/contents", headers=team.headers("carol"))
    assert listing.status_code == 200, listing.text
    sizes = {f["path"]: f["bytes"] for f in listing.json()["files"]}
    assert sizes == {"data.bin": len(BODY), "hparams.yaml": 8, "ckpt/model.pt": 7}
    assert listing.json()["truncated"] is False


def test_a_download_is_an_attachment_no_browser_renders(team: Team) -> None:
    run_id, logdir = make_run(team)
    (logdir / 'evil"<b>.html').write_text("<script>alert(1)</script>")
    (logdir / "plot.svg").write_text("<svg onload='alert(1)'/>")
    for name in ('evil"<b>.html', "plot.svg", "data.bin"):
        got = team.client.get(f"{RUNS}/{run_id}/contents/{name}", headers=team.headers("carol"))
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/octet-stream"
        assert got.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in got.headers["content-security-policy"]
        disposition = got.headers["content-disposition"]
        assert disposition.startswith('attachment; filename="') and "<" not in disposition
    got = team.client.get(f"{RUNS}/{run_id}/contents/{'evil%22%3Cb%3E.html'}",
                          headers=team.headers("carol"))  # fmt: skip
    assert got.headers["content-disposition"] == (
        "attachment; filename=\"evil__b_.html\"; filename*=UTF-8''evil%22%3Cb%3E.html"
    )
    yaml = team.client.get(f"{RUNS}/{run_id}/contents/hparams.yaml", headers=team.headers("carol"))
    assert yaml.headers["content-type"] == "text/plain; charset=utf-8"


def test_head_gives_the_size_and_validators_without_the_body(team: Team) -> None:
    run_id, logdir = make_run(team)
    got = team.client.head(f"{RUNS}/{run_id}/contents/data.bin", headers=team.headers("carol"))
    assert got.status_code == 200 and got.content == b""
    assert got.headers["content-length"] == str(len(BODY))
    assert got.headers["accept-ranges"] == "bytes"
    st = os.stat(logdir / "data.bin")
    assert got.headers["etag"] == f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'
    assert got.headers["last-modified"].endswith(" GMT")


# Range header -> (status, first byte, last byte) of the answer; None: the whole file (200).
N = len(BODY)
RANGES: dict[str, tuple[int, int, int] | None] = {
    "bytes=0-99": (206, 0, 99),  # the first bytes
    "bytes=5000-5099": (206, 5000, 5099),  # the middle
    "bytes=-100": (206, N - 100, N - 1),  # the last 100
    "bytes=-999999": (206, 0, N - 1),  # a suffix longer than the file: all of it
    "bytes=10000-": (206, 10000, N - 1),  # an open end
    "bytes=10000-99999999": (206, 10000, N - 1),  # an end past the end is cut to it
    "Bytes=1-1": (206, 1, 1),  # the unit is case-insensitive
    "bytes=0-0,5-9": None,  # several ranges: ignored, the whole file
    "bytes=9-5": None,  # last before first: invalid, ignored
    "bytes=x-5": None,  # malformed: ignored
    "bytes=-": None,
    "items=0-5": None,  # a unit tbhub does not know: ignored
}


@pytest.mark.parametrize("header", list(RANGES))
def test_a_range_gets_exactly_those_bytes(team: Team, header: str) -> None:
    run_id, _ = make_run(team)
    got = team.client.get(f"{RUNS}/{run_id}/contents/data.bin",
                          headers={**team.headers("carol"), "Range": header})  # fmt: skip
    expected = RANGES[header]
    if expected is None:
        assert (got.status_code, got.content) == (200, BODY)
        assert "content-range" not in got.headers
        return
    status, first, last = expected
    assert got.status_code == status, got.text
    assert got.content == BODY[first : last + 1]
    assert got.headers["content-range"] == f"bytes {first}-{last}/{N}"
    assert got.headers["content-length"] == str(last - first + 1)


@pytest.mark.parametrize("header", ["bytes=10240-", "bytes=99999-100000", "bytes=-0"])
def test_a_range_past_the_end_is_416_with_the_size(team: Team, header: str) -> None:
    run_id, _ = make_run(team)
    got = team.client.get(f"{RUNS}/{run_id}/contents/data.bin",
                          headers={**team.headers("carol"), "Range": header})  # fmt: skip
    assert got.status_code == 416
    assert got.headers["content-range"] == f"bytes */{N}"
    assert got.json()["error"]["code"] == "range_not_satisfiable"


def test_if_range_resumes_the_same_version_only(team: Team) -> None:
    run_id, logdir = make_run(team)
    url, reader = f"{RUNS}/{run_id}/contents/data.bin", team.headers("carol")
    etag = team.client.head(url, headers=reader).headers["etag"]
    same = team.client.get(url, headers={**reader, "Range": "bytes=100-", "If-Range": etag})
    assert (same.status_code, same.content) == (206, BODY[100:])
    (logdir / "data.bin").write_bytes(BODY[::-1])  # a new version
    os.utime(logdir / "data.bin", ns=(1, 10**18))
    changed = team.client.get(url, headers={**reader, "Range": "bytes=100-", "If-Range": etag})
    assert (changed.status_code, changed.content) == (200, BODY[::-1])


def test_symlinks_anywhere_on_the_path_are_refused(team: Team, tmp_path: Path) -> None:
    run_id, logdir = make_run(team)
    other_id, other = make_run(team, "other")
    secret = team.settings.storage / "speech" / "secret.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text("speech's data")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.pt").write_text("not the run's")
    (logdir / "passwd").symlink_to("/etc/passwd")
    (logdir / "neighbour.txt").symlink_to(secret)
    (logdir / "sibling.bin").symlink_to(other / "data.bin")
    (logdir / "linked").symlink_to(outside)  # a symlinked directory on the way
    (logdir / "relative").symlink_to("../other")
    for name in ("passwd", "neighbour.txt", "sibling.bin", "linked/model.pt",
                 "relative/data.bin"):  # fmt: skip
        got = team.client.get(f"{RUNS}/{run_id}/contents/{name}", headers=team.headers("alice"))
        assert got.status_code == 400, (name, got.text)
        assert got.json()["error"]["code"] == "unsafe_path"
        assert b"root:" not in got.content and b"data" not in got.content
    listed = team.client.get(f"{RUNS}/{run_id}/contents", headers=team.headers("alice")).json()
    assert sorted(f["path"] for f in listed["files"]) == ["ckpt/model.pt", "data.bin",
                                                          "hparams.yaml"]  # fmt: skip
    assert other_id != run_id


def test_a_run_directory_swapped_for_a_symlink_serves_nothing(team: Team) -> None:
    run_id, logdir = make_run(team)
    _, other = make_run(team, "other")
    os.rename(logdir, logdir.with_name("moved"))
    logdir.symlink_to(other)
    got = team.client.get(f"{RUNS}/{run_id}/contents/data.bin", headers=team.headers("alice"))
    assert got.status_code == 400 and got.json()["error"]["code"] == "unsafe_path"


@pytest.mark.parametrize(
    "path",
    ["%2E%2E/other/data.bin", "ckpt/%2e%2e/data.bin", "%2E/data.bin", "ckpt//model.pt",
     "%2Fetc%2Fpasswd", "..%2F..%2Fspeech%2Fsecret.txt", "ckpt/%2E%2E/%2E%2E/other/data.bin"],
)  # fmt: skip
def test_traversal_is_refused(team: Team, path: str) -> None:
    """Dots are percent-encoded: the HTTP client would remove plain dot segments itself."""
    run_id, _ = make_run(team)
    make_run(team, "other")
    got = team.client.get(f"{RUNS}/{run_id}/contents/{path}", headers=team.headers("alice"))
    assert got.status_code in (400, 404), got.text
    assert got.content != BODY and b"root:" not in got.content
    assert set(got.json()) == {"error"}


def test_a_path_longer_than_the_bound_is_refused(team: Team) -> None:
    run_id, _ = make_run(team)
    got = team.client.get(f"{RUNS}/{run_id}/contents/{'a/' * 600}x", headers=team.headers("bob"))
    assert got.status_code == 422 and "path" in got.json()["error"]["message"]
    one_name = team.client.get(f"{RUNS}/{run_id}/contents/{'n' * 300}", headers=team.headers("bob"))
    assert one_name.status_code == 400
    assert one_name.json()["error"]["code"] == "name_too_long"


def test_a_directory_or_a_fifo_is_refused_with_what_to_do(team: Team) -> None:
    run_id, logdir = make_run(team)
    os.mkfifo(logdir / "pipe")
    for name, what in (("ckpt", "is a directory"), ("pipe", "is not a regular file")):
        got = team.client.get(f"{RUNS}/{run_id}/contents/{name}", headers=team.headers("bob"))
        assert got.status_code == 422, got.text
        message = got.json()["error"]["message"]
        assert what in message and "download the regular files" in message


def test_a_missing_file_or_a_trashed_run_is_404(team: Team) -> None:
    run_id, logdir = make_run(team)
    missing = team.client.get(f"{RUNS}/{run_id}/contents/nope", headers=team.headers("bob"))
    assert missing.status_code == 404 and "list its files" in missing.json()["error"]["message"]
    hidden = ".model.pt.tbhub-partial"
    (logdir / hidden).write_bytes(b"upload in progress")
    partial = team.client.get(f"{RUNS}/{run_id}/contents/{hidden}", headers=team.headers("bob"))
    assert partial.status_code == 404
    assert team.client.delete(f"{RUNS}/{run_id}", headers=team.headers("bob")).status_code == 200
    trashed = team.client.get(f"{RUNS}/{run_id}/contents/data.bin", headers=team.headers("bob"))
    assert trashed.status_code == 404 and "trash restore" in trashed.json()["error"]["message"]


def test_a_large_file_arrives_whole(team: Team) -> None:
    run_id, logdir = make_run(team)
    big = os.urandom(2 * CHUNK_BYTES + 12345)  # more than one read of the sender
    (logdir / "big.ckpt").write_bytes(big)
    got = team.client.get(f"{RUNS}/{run_id}/contents/big.ckpt", headers=team.headers("carol"))
    assert hashlib.sha256(got.content).hexdigest() == hashlib.sha256(big).hexdigest()
