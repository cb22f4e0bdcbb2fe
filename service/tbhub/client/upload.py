"""Upload a local log directory into a run, incrementally and resumably. Needs only httpx.

Each pass asks the server how much of each file it holds (once, then it remembers) and sends
the rest in chunks, each with its SHA-256. An interrupted upload resumes where the server's
copy ends, so only the remainder is sent again. Event files are sent up to their last whole
TFRecord record while the job is still writing, in chunks that end where records end (only
a record longer than a chunk is cut, and the server holds its pieces back until it is
whole), so the board never sees a torn record, even if this upload is killed; other files
are sent once they have stopped changing, and renamed into place by the server when their
last chunk arrives. `close()` (or `sync(final=True)`) sends everything that is left.
"""

from __future__ import annotations

import logging
import mmap
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

import httpx

from tbhub.client.http import ApiError, error_from
from tbhub.core.errors import TbhubError
from tbhub.core.upload_protocol import (
    BATCH_TYPE,
    COMPLETE_HEADER,
    DIGEST_HEADER,
    MAX_BATCH_FILES,
    OFFSET_HEADER,
    check_upload_path,
    content_digest,
    is_event_file,
    pack_batch,
)
from tbhub.storage.tfrecord import chunk_ends, whole_records_end

log = logging.getLogger("tbhub.client.upload")

MIN_CHUNK = 1 << 16
TAR_OVERHEAD = 1024  # a file's header and padding in a batch, at most (short names)
RETRYABLE = frozenset({408, 429, 500, 502, 503, 504})
Progress = Callable[[int, int], None]  # (bytes sent so far, bytes to send in this pass)


class UploadError(ApiError):
    """The server refused the upload (or could not be reached after every retry)."""

    def __init__(
        self, message: str, *, status: int = 0, code: str = "upload_failed", offset: int | None
    ) -> None:
        super().__init__(message, status=status, code=code)
        self.offset = offset  # on 409: where the server's copy ends


@dataclass
class SyncReport:
    files: int = 0  # files that had something to send
    bytes_sent: int = 0  # chunk bytes the server accepted (retries not counted twice)
    skipped: list[str] = field(default_factory=list)  # local files the server would refuse

    def add(self, other: SyncReport) -> None:
        self.files += other.files
        self.bytes_sent += other.bytes_sent
        self.skipped += [p for p in other.skipped if p not in self.skipped]


@dataclass
class _Remote:
    offset: int = 0
    complete: bool = False
    mtime: float = 0.0  # the local mtime that this copy was completed from


@dataclass(frozen=True)
class _Local:
    path: Path
    rel: str
    size: int
    mtime: float


Planned = tuple[_Local, int, bool]  # a file, send it up to this byte, finish it


class Uploader:
    def __init__(
        self,
        http: httpx.Client,
        upload_url: str,
        local_dir: Path,
        *,
        chunk_bytes: int = 8 << 20,
        retries: int = 5,
        backoff: float = 0.5,
        settle_seconds: float = 5.0,
        parallel: int = 8,
        batch_bytes: int = 4 << 20,
        on_progress: Progress | None = None,
    ) -> None:
        self.http = http
        self.upload_url = upload_url if upload_url.endswith("/") else upload_url + "/"
        self.local_dir = Path(local_dir)
        self.chunk_bytes = chunk_bytes
        self.retries = retries
        self.backoff = backoff
        self.settle_seconds = settle_seconds  # a non-event file unchanged this long is done
        self.parallel = parallel
        self.batch_bytes = batch_bytes  # small files go this many bytes a request; 0: one each
        self.on_progress = on_progress
        self._remote: dict[str, _Remote] | None = None
        self._lock = threading.Lock()  # one pass at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.total = SyncReport()
        self.error: TbhubError | None = None  # what stopped the background thread, if anything

    # -- one pass ---------------------------------------------------------------------------

    def sync(self, *, final: bool = False) -> SyncReport:
        """Send what is new. `final`: also a trailing partial record and unsettled files.
        Up to `parallel` files go at once, so one file's network and disk waits overlap
        another's."""
        with self._lock:
            if self._remote is None:
                self._remote = self._fetch_remote()
            files, skipped = self._local_files()
            plan = list(self._plan(files, final))
            report = SyncReport(files=len(plan), skipped=skipped)
            todo = sum(end - self._remote[local.rel].offset for local, end, _ in plan)
            counted = threading.Lock()

            def sent(size: int) -> None:
                with counted:
                    report.bytes_sent += size
                    done = report.bytes_sent
                if self.on_progress is not None:
                    self.on_progress(done, todo)

            small, large = self._batches(plan)
            remote = self._remote
            large.sort(key=lambda item: item[1] - remote[item[0].rel].offset, reverse=True)
            tasks = _interleaved(
                [partial(self._send_file, *item, sent) for item in large],
                [partial(self._send_batch, batch, sent) for batch in small],
                first=self.parallel,
            )
            with ThreadPoolExecutor(self.parallel, thread_name_prefix="tbhub-upload") as pool:
                futures = [pool.submit(task) for task in tasks]
                for future in futures:
                    future.result()  # the first failure, after every file had its go
            self.total.add(report)
            return report

    def _batches(self, plan: list[Planned]) -> tuple[list[list[Planned]], list[Planned]]:
        """Small files the server holds nothing of, in batches of whole files (one request
        each, as rsync pipelines small files), and the files sent chunk by chunk."""
        assert self._remote is not None
        limit = min(self.batch_bytes, self.chunk_bytes)
        batches: list[list[Planned]] = [[]]
        large, size = [], 0
        for item in plan:
            local, end, _ = item
            if self._remote[local.rel].offset or end > limit // 4 or not self.batch_bytes:
                large.append(item)
                continue
            if size + end + TAR_OVERHEAD > limit or len(batches[-1]) == MAX_BATCH_FILES:
                batches.append([])
                size = 0
            batches[-1].append(item)
            size += end + TAR_OVERHEAD
        return [batch for batch in batches if batch], large

    def _plan(self, files: list[_Local], final: bool) -> Iterator[Planned]:
        """(file, send up to this byte, finish it) for every file with something to send."""
        assert self._remote is not None
        now = time.time()
        for local in files:
            remote = self._remote.setdefault(local.rel, _Remote())
            if is_event_file(local.path.name):
                if local.size < remote.offset:
                    log.warning("%s shrank below what was uploaded; not sending it", local.rel)
                    continue
                end = local.size if final else _whole_records_end(local, remote.offset)
                if end > remote.offset:
                    yield local, end, False
                continue
            unchanged = remote.complete and remote.offset == local.size
            if unchanged and remote.mtime in (0.0, local.mtime):
                continue
            if not final and now - local.mtime < self.settle_seconds:
                continue  # still being written: send it once it settles
            if remote.complete:  # a new version of a finished file starts from scratch
                self._remote[local.rel] = _Remote()
            yield local, local.size, True

    def _local_files(self) -> tuple[list[_Local], list[str]]:
        """Regular files under the local directory (symlinks are not followed), and the paths
        the server would refuse."""
        files, skipped = [], []
        for dirpath, dirnames, filenames in os.walk(self.local_dir):
            dirnames.sort()
            for name in sorted(filenames):
                path = Path(dirpath) / name
                rel = path.relative_to(self.local_dir).as_posix()
                try:
                    check_upload_path(rel)
                    st = path.lstat()
                except (TbhubError, OSError):
                    skipped.append(rel)
                    continue
                if stat.S_ISREG(st.st_mode):
                    files.append(_Local(path, rel, st.st_size, st.st_mtime))
        return files, skipped

    # -- HTTP ---------------------------------------------------------------------------------

    def _url(self, rel: str) -> str:
        return self.upload_url + "/".join(quote(part, safe="") for part in rel.split("/"))

    def _fetch_remote(self) -> dict[str, _Remote]:
        response = self._request("GET", self.upload_url)
        return {
            item["path"]: _Remote(int(item["offset"]), bool(item["complete"]))
            for item in response.json()["files"]
        }

    def _send_file(
        self, local: _Local, end: int, complete: bool, sent: Callable[[int], None]
    ) -> None:
        assert self._remote is not None
        remote = self._remote[local.rel]
        try:
            fh = open(local.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:  # removed since the walk: nothing to send
            return
        with fh, _mapped(fh, end) as data:
            while remote.offset < end or (complete and not remote.complete):
                offset = remote.offset
                if offset > end:
                    log.warning("the server holds more of %s than there is here", local.rel)
                    return
                chunk = data[offset : self._chunk_end(data, offset, end, local.rel)]
                last = complete and offset + len(chunk) >= end
                accepted = self._send_chunk(local.rel, offset, chunk, last)
                if accepted is None:  # refused: the server holds something else
                    continue
                remote.offset, remote.complete = accepted, last
                sent(len(chunk))
        if complete:
            remote.mtime = local.mtime

    def _send_batch(self, batch: list[Planned], sent: Callable[[int], None]) -> None:
        """Whole small files in one request; should the server refuse it for an offset (it
        holds something of one of them after all) or its size, each goes on its own."""
        assert self._remote is not None
        files = []
        for local, end, _ in batch:
            try:
                with open(local.path, "rb") as fh:
                    data = fh.read(end)
            except FileNotFoundError:  # removed since the walk: nothing to send
                continue
            if len(data) == end:  # one that shrank since the walk waits for the next pass
                files.append((local, data))
        if not files:
            return
        body = pack_batch([(local.rel, data) for local, data in files])
        try:
            response = self._request("POST", self.upload_url, content=body, headers={
                DIGEST_HEADER: content_digest(body), "Content-Type": BATCH_TYPE})  # fmt: skip
        except UploadError as exc:
            if exc.http_status == 413 and len(batch) > 1:  # the server allows less: halves
                self.batch_bytes = max(MIN_CHUNK, len(body) // 2)
                self._send_batch(batch[: len(batch) // 2], sent)
                self._send_batch(batch[len(batch) // 2 :], sent)
                return
            if exc.http_status not in (409, 413):
                raise
            for item in batch:
                self._send_file(*item, sent)
            return
        held = {item["path"]: item for item in response.json()["files"]}
        for local, data in files:
            remote = self._remote[local.rel]
            remote.offset = int(held[local.rel]["offset"])
            remote.complete = bool(held[local.rel]["complete"])
            if remote.complete:
                remote.mtime = local.mtime
            sent(len(data))

    def _chunk_end(self, data: bytes | mmap.mmap, offset: int, end: int, rel: str) -> int:
        """Where the chunk from `offset` ends: for an event file, where its last whole record
        ends (inside a record only when one is longer than a chunk), so the board never
        reads a torn record, even when this upload is stopped."""
        if offset >= end:
            return end
        if not is_event_file(rel.rsplit("/", 1)[-1]):
            return min(end, offset + self.chunk_bytes)
        return next(chunk_ends(data, offset, end, self.chunk_bytes))

    def _send_chunk(self, rel: str, offset: int, chunk: bytes, last: bool) -> int | None:
        """The server's offset after the chunk, or None when it was refused and the file's
        remote state now says where to go on from."""
        assert self._remote is not None
        headers = {
            OFFSET_HEADER: str(offset),
            DIGEST_HEADER: content_digest(chunk),
            "Content-Type": "application/octet-stream",
        }
        if last:
            headers[COMPLETE_HEADER] = "?1"
        try:
            response = self._request("PATCH", self._url(rel), content=chunk, headers=headers)
        except UploadError as exc:
            if exc.http_status == 409 and exc.offset is not None:
                remote = self._remote[rel]
                remote.offset, remote.complete = exc.offset, False
                return None
            if exc.http_status == 413 and len(chunk) > MIN_CHUNK:
                self.chunk_bytes = max(MIN_CHUNK, len(chunk) // 2)  # the server allows less
                return None
            raise
        return int(response.headers[OFFSET_HEADER])

    def _request(self, method: str, url: str, **kwargs: object) -> httpx.Response:
        """One request with retries for what may pass (no answer, 5xx, 429)."""
        for attempt in range(self.retries + 1):
            try:
                response = self.http.request(method, url, **kwargs)  # type: ignore[arg-type]
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise UploadError(
                        f"cannot reach tbhub ({exc.__class__.__name__}: {exc}); the upload "
                        "resumes where it stopped when you run it again",
                        code="unreachable",
                        offset=None,
                    ) from None
            else:
                if response.status_code not in RETRYABLE or attempt == self.retries:
                    if response.is_error:
                        raise _error_of(response)
                    return response
            time.sleep(min(self.backoff * 2**attempt, 10.0))
        raise AssertionError("unreachable")

    # -- in the background --------------------------------------------------------------------

    def start_background(self, interval: float = 5.0) -> None:
        """Sync every `interval` seconds in a thread until close()."""

        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    self.sync()
                except TbhubError as exc:
                    log.warning("upload pass failed, will retry: %s", exc.message)
                    self.error = exc
                except OSError as exc:  # a local file that changed under us; next pass
                    log.warning("upload pass failed, will retry: %s", exc)

        self._thread = threading.Thread(target=loop, name="tbhub-upload", daemon=True)
        self._thread.start()

    def close(self, timeout: float | None = None) -> SyncReport:
        """Stop the background thread and send everything that is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.sync(final=True)
        return self.total

    def watch(self, interval: float = 2.0, stop: threading.Event | None = None) -> SyncReport:
        """Sync every `interval` seconds until `stop` is set (or Ctrl-C), then a final pass."""
        stop = stop or threading.Event()
        try:
            while True:
                self.sync()
                if stop.wait(interval):
                    break
        except KeyboardInterrupt:
            pass
        self.sync(final=True)
        return self.total


def _interleaved(
    large: list[Callable[[], None]], batches: list[Callable[[], None]], *, first: int
) -> list[Callable[[], None]]:
    """The order files go in: the `first` largest (one a thread) before anything else, then
    a batch of small files after each further file, then what is left.

    A file's chunks go one after another, so a big file started last would end the pass
    alone while the other threads wait. The batches go between the other files instead of
    after all of them: a batch's time on the server is mostly waits on the disk (creating
    hundreds of files, their syncs and renames), which then overlap the big files' writes
    and digests, where they used to be the pass's last seconds, with little else to do."""
    order = large[:first]
    for index, task in enumerate(large[first:]):
        order += [task, *batches[index : index + 1]]
    return order + batches[len(large[first:]) :]


def _error_of(response: httpx.Response) -> UploadError:
    error = error_from(response)
    offset = response.headers.get(OFFSET_HEADER, "")
    return UploadError(
        error.message,
        status=error.http_status,
        code=error.code,
        offset=int(offset) if offset.isdigit() else None,
    )


def _whole_records_end(local: _Local, start: int) -> int:
    """Where the last whole TFRecord record at or after `start` ends (start if none)."""
    with open(local.path, "rb") as fh, _mapped(fh, local.size) as data:
        return whole_records_end(data, start)


@contextmanager
def _mapped(fh: BinaryIO, size: int) -> Iterator[bytes | mmap.mmap]:
    """The first `size` bytes of an open file, memory-mapped (b'' for an empty file)."""
    if size == 0:
        yield b""
        return
    with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as mapped:
        yield mapped
