"""Download one file of a run (`GET .../runs/<id>/contents/<path>`) to a local path.

The bytes go to `<out>.tbhub-download` beside the target and are renamed into place when
whole, so a file at `<out>` is always complete. An interrupted download is resumed from
where it stopped: `Range: bytes=<held>-` with `If-Range: <ETag>` (kept in
`<out>.tbhub-download.etag`), so a file changed on the server in between is downloaded
again from the start rather than spliced from two versions.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx

from tbhub.client.http import ApiError, Client, error_from
from tbhub.core.errors import AlreadyExists

PARTIAL_SUFFIX = ".tbhub-download"
CHUNK_BYTES = 1 << 20
Progress = Callable[[int, int], None]  # (bytes held, bytes in all)


@dataclass(frozen=True)
class Downloaded:
    path: str
    bytes: int
    resumed_from: int
    sha256: str
    etag: str

    def as_json(self) -> dict[str, object]:
        return {"path": self.path, "bytes": self.bytes, "resumed_from": self.resumed_from,
                "sha256": self.sha256, "etag": self.etag}  # fmt: skip


def contents_url(project: str, run_id: int, file_path: str) -> str:
    return f"/api/v1/projects/{quote(project)}/runs/{run_id}/contents/{quote(file_path)}"


def download_file(
    client: Client,
    project: str,
    run_id: int,
    file_path: str,
    out: Path,
    *,
    progress: Progress | None = None,
) -> Downloaded:
    if out.exists():
        raise AlreadyExists(f"{out} already exists; remove it or choose another path with -o")
    partial = out.with_name(out.name + PARTIAL_SUFFIX)
    etag_file = partial.with_name(partial.name + ".etag")
    held = partial.stat().st_size if partial.exists() else 0
    etag = etag_file.read_text().strip() if held and etag_file.exists() else ""
    headers = {"Range": f"bytes={held}-", "If-Range": etag} if etag else {}
    try:
        with client.http.stream(
            "GET", contents_url(project, run_id, file_path), headers=headers
        ) as response:
            if response.status_code == 416 and etag and _total(response) == held:
                resumed = held  # all of it arrived last time, only the rename was left
            else:
                resumed = _receive(response, partial, etag_file, held if etag else 0, progress)
    except httpx.TransportError as exc:
        raise ApiError(
            f"the download stopped ({exc.__class__.__name__}: {exc}); run the same command "
            "again to resume it",
            status=0,
            code="unreachable",
        ) from None
    digest = hashlib.sha256()
    with partial.open("rb") as held_file:
        while chunk := held_file.read(CHUNK_BYTES):
            digest.update(chunk)
    size = partial.stat().st_size
    tag = etag_file.read_text().strip() if etag_file.exists() else ""
    os.replace(partial, out)
    etag_file.unlink(missing_ok=True)
    return Downloaded(str(out), size, resumed, digest.hexdigest(), tag)


def _total(response: httpx.Response) -> int | None:
    """The size in `Content-Range: bytes */<size>` or `bytes a-b/<size>`."""
    total = response.headers.get("content-range", "").rpartition("/")[2]
    return int(total) if total.isdigit() else None


def _receive(
    response: httpx.Response, partial: Path, etag_file: Path, held: int, progress: Progress | None
) -> int:
    """Write the answer's body to `partial`: appended after `held` bytes for a 206, from the
    start for a 200. The offset the body started at."""
    if response.is_error:
        response.read()
        raise error_from(response)
    start = held if response.status_code == 206 else 0
    total = _total(response) if start else None
    if total is None:
        total = start + int(response.headers.get("content-length", "0"))
    etag_file.write_text(response.headers.get("etag", "") + "\n")
    with partial.open("r+b" if start else "wb") as sink:
        sink.seek(start)
        sink.truncate()
        done = start
        for chunk in response.iter_bytes(CHUNK_BYTES):
            sink.write(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    if done != total:
        raise ApiError(
            f"the download ended after {done} of {total} bytes; run the same command again "
            "to resume it",
            status=0,
            code="incomplete",
        )
    return start
