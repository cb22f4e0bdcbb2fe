"""The upload store on a real filesystem: append-only resumable files, retries, offsets,
atomic completion, and paths and symlinks that must never lead out of the run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbhub.core.errors import InsufficientStorage, OffsetMismatch, UnsafePath
from tbhub.core.upload_protocol import check_upload_path
from tbhub.storage.tfrecord import framed
from tbhub.storage.uploads import append_chunk, file_state, list_files

EVENTS = "events.out.tfevents.1700000000.host.1.0"
ABC, DEF = framed(b"abc"), framed(b"def")  # whole TFRecord records, as event files hold


def no_limit(_dir_fd: int, _size: int) -> None:
    return None


def put(run_fd: int, path: str, offset: int, data: bytes, *, complete: bool = False) -> int:
    state = append_chunk(
        run_fd, check_upload_path(path), offset=offset, data=data, complete=complete,
        room=no_limit,
    )  # fmt: skip
    return state.offset


@pytest.mark.parametrize(
    "raw",
    [
        "../x",
        "a/../../x",
        "..",
        "/etc/passwd",
        "%2e%2e/x",  # double-encoded '..' arrives decoded once
        "%252e%252e/x",
        "a\\..\\b",
        "..\\x",
        "a\0b",
        "a\nb",
        "",
        "a//b",
        "./x",
        "x/",
        "hparams.yaml.tbhub-partial",
        "a" * 256,
        "/".join(["d"] * 600),
    ],
)
def test_paths_that_could_leave_the_run_are_refused(raw: str) -> None:
    with pytest.raises(UnsafePath):
        check_upload_path(raw)


def test_ordinary_paths_pass() -> None:
    assert check_upload_path(f"train/{EVENTS}") == ["train", EVENTS]
    assert check_upload_path(".hydra/config.yaml") == [".hydra", "config.yaml"]


def test_event_file_grows_in_place_and_resumes_at_its_end(run_fd: int, run_dir: Path) -> None:
    assert put(run_fd, EVENTS, 0, ABC) == len(ABC)
    assert (run_dir / EVENTS).read_bytes() == ABC  # visible at once: the board follows it
    assert put(run_fd, EVENTS, len(ABC), DEF) == len(ABC + DEF)
    state = file_state(run_fd, [EVENTS])
    assert (state.offset, state.complete, state.kind) == (len(ABC + DEF), False, "events")


def test_a_retried_chunk_succeeds_without_writing_twice(run_fd: int, run_dir: Path) -> None:
    put(run_fd, EVENTS, 0, ABC)
    put(run_fd, EVENTS, len(ABC), DEF)
    assert put(run_fd, EVENTS, len(ABC), DEF) == len(ABC + DEF)
    assert put(run_fd, EVENTS, 0, ABC) == len(ABC + DEF)
    assert (run_dir / EVENTS).read_bytes() == ABC + DEF


def test_a_chunk_at_the_wrong_offset_names_the_right_one(run_fd: int, run_dir: Path) -> None:
    put(run_fd, EVENTS, 0, ABC)
    end = len(ABC)
    for offset, data in ((end + 2, b"zz"), (2, b"zz"), (0, framed(b"xyz"))):
        with pytest.raises(OffsetMismatch) as caught:
            put(run_fd, EVENTS, offset, data)
        assert caught.value.offset == end
    assert (run_dir / EVENTS).read_bytes() == ABC


def test_a_first_chunk_not_at_zero_creates_nothing(run_fd: int, run_dir: Path) -> None:
    with pytest.raises(OffsetMismatch) as caught:
        put(run_fd, EVENTS, 10, b"x")
    assert caught.value.offset == 0
    assert list(run_dir.iterdir()) == []


def test_other_files_appear_only_whole(run_fd: int, run_dir: Path) -> None:
    put(run_fd, "cfg/hparams.yaml", 0, b"lr: ")
    assert not (run_dir / "cfg" / "hparams.yaml").exists()
    assert "tfevents" not in os.listdir(run_dir / "cfg")[0]
    assert file_state(run_fd, ["cfg", "hparams.yaml"]).offset == 4
    put(run_fd, "cfg/hparams.yaml", 4, b"0.1\n", complete=True)
    assert os.listdir(run_dir / "cfg") == ["hparams.yaml"]
    assert (run_dir / "cfg" / "hparams.yaml").read_bytes() == b"lr: 0.1\n"
    state = file_state(run_fd, ["cfg", "hparams.yaml"])
    assert (state.offset, state.complete, state.kind) == (8, True, "file")


def test_retrying_the_completing_chunk_succeeds(run_fd: int, run_dir: Path) -> None:
    put(run_fd, "a.txt", 0, b"hello", complete=True)
    assert put(run_fd, "a.txt", 0, b"hello", complete=True) == 5
    with pytest.raises(OffsetMismatch) as caught:
        put(run_fd, "a.txt", 2, b"XXX", complete=True)
    assert caught.value.offset == 0
    assert (run_dir / "a.txt").read_bytes() == b"hello"


def test_a_finished_file_is_replaced_only_by_a_whole_new_version(
    run_fd: int, run_dir: Path
) -> None:
    put(run_fd, "a.txt", 0, b"hello", complete=True)
    put(run_fd, "a.txt", 0, b"HEL")
    assert (run_dir / "a.txt").read_bytes() == b"hello"  # the old version until the new is whole
    put(run_fd, "a.txt", 3, b"LO!", complete=True)
    assert (run_dir / "a.txt").read_bytes() == b"HELLO!"


def test_an_unfinished_file_can_start_over_from_zero(run_fd: int, run_dir: Path) -> None:
    put(run_fd, "a.txt", 0, b"old-")
    assert put(run_fd, "a.txt", 0, b"new") == 3
    put(run_fd, "a.txt", 3, b"!", complete=True)
    assert (run_dir / "a.txt").read_bytes() == b"new!"


def test_listing_shows_final_names_with_their_offsets(run_fd: int) -> None:
    put(run_fd, f"train/{EVENTS}", 0, b"12345")
    put(run_fd, "hparams.yaml", 0, b"ab")
    put(run_fd, "done.txt", 0, b"x", complete=True)
    listed = {s.path: (s.offset, s.complete, s.kind) for s in list_files(run_fd)}
    assert listed == {
        f"train/{EVENTS}": (5, False, "events"),
        "hparams.yaml": (2, False, "file"),
        "done.txt": (1, True, "file"),
    }


def test_symlinks_in_the_run_are_never_followed(tmp_path: Path, run_fd: int, run_dir: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_bytes(b"keep")
    (run_dir / EVENTS).symlink_to(outside / "target")
    (run_dir / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePath):
        put(run_fd, EVENTS, 4, b"more")
    with pytest.raises(UnsafePath):
        put(run_fd, "sub/new.txt", 0, b"x", complete=True)
    with pytest.raises(UnsafePath):
        file_state(run_fd, [EVENTS])
    assert os.listdir(outside) == ["target"]
    assert (outside / "target").read_bytes() == b"keep"


def test_a_refused_first_chunk_leaves_no_empty_file(run_fd: int, run_dir: Path) -> None:
    def full(_dir_fd: int, size: int) -> None:
        raise InsufficientStorage(f"no room for {size} bytes")

    with pytest.raises(InsufficientStorage):
        append_chunk(run_fd, [EVENTS], offset=0, data=ABC, complete=False, room=full)
    assert list(run_dir.iterdir()) == []


@pytest.fixture
def tiny_run_fd(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A run directory on a 1 MiB tmpfs this test mounts, unmounted even on failure."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    import subprocess

    mount = tmp_path / "tiny"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)
    try:
        fd = os.open(mount, os.O_RDONLY | os.O_DIRECTORY)
        try:
            yield fd, mount
        finally:
            os.close(fd)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_full_disk_keeps_nothing_of_the_chunk(tiny_run_fd: tuple[int, Path]) -> None:
    fd, mount = tiny_run_fd
    put(fd, EVENTS, 0, b"a" * 1000)
    with pytest.raises(InsufficientStorage, match="storage is full"):
        put(fd, EVENTS, 1000, os.urandom(2 << 20))
    assert (mount / EVENTS).read_bytes() == b"a" * 1000
    assert put(fd, EVENTS, 1000, b"b") == 1001  # and the upload resumes where it was


def test_a_batch_makes_each_directory_durable_once_after_its_last_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file's bytes are fdatasynced before its rename, the files of a group written
    together before the first of those syncs (one journal commit carries them all); the
    names renamed into a directory are fsynced once, after the last rename into it and
    before the batch answers."""
    import hashlib
    import stat

    from tbhub.core.upload_protocol import pack_batch
    from tbhub.storage.quota_ledger import QuotaLedger
    from tbhub.storage.receive import UploadTarget, receive_batch
    from tbhub.storage.usage import ProjectUsage

    (tmp_path / "p").mkdir()
    files = [(f"samples/step-{i}.json", b"x" * i) for i in range(1, 41)]
    files += [(f"config-{i}.yaml", b"y" * i) for i in range(1, 11)]
    body = pack_batch(files)
    events: list[tuple[str, object]] = []
    real_fsync, real_fdatasync, real_rename = os.fsync, os.fdatasync, os.rename
    real_pwrite = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        events.append(("pwrite", os.fstat(fd).st_ino))
        return real_pwrite(fd, data, offset)

    def fsync(fd: int) -> None:
        st = os.fstat(fd)
        events.append(("fsync-dir" if stat.S_ISDIR(st.st_mode) else "fsync", st.st_ino))
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        events.append(("fdatasync", os.fstat(fd).st_ino))
        real_fdatasync(fd)

    def rename(src: str, dst: str, **kwargs: int) -> None:
        st = os.fstat(kwargs["dst_dir_fd"])
        moved = os.stat(src, dir_fd=kwargs["src_dir_fd"], follow_symlinks=False).st_ino
        events.append(("rename", (st.st_ino, os.fstat(kwargs["src_dir_fd"]).st_ino, moved)))
        real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "rename", rename)
    target = UploadTarget(
        tmp_path, "p", "run-1", None, 0, ProjectUsage(tmp_path, QuotaLedger(tmp_path / "ledger"))
    )
    states = receive_batch(target, body, sha256=hashlib.sha256(body).digest())

    assert all(state.complete for state in states) and len(states) == len(files)
    run = tmp_path / "p" / "run-1"
    for path, data in files:
        assert (run / path).read_bytes() == data
    renames = [i for i, (kind, _) in enumerate(events) if kind == "rename"]
    assert len(renames) == len(files)
    for directory in (run, run / "samples"):
        inode = directory.stat().st_ino
        into = [i for i in renames if events[i][1][0] == inode]  # type: ignore[index]
        syncs = [i for i, event in enumerate(events) if event == ("fsync-dir", inode)]
        assert into, directory
        assert [i for i in syncs if i > max(into)] == syncs[-1:], "synced once after renames"
        assert len([i for i in syncs if i > min(into)]) == 1, "not once a file"
    datasyncs = [i for i, (kind, _) in enumerate(events) if kind == "fdatasync"]
    assert len(datasyncs) == len(files), "every file's bytes on disk before its rename"
    for i in renames:  # each rename follows that file's own fdatasync
        moved = events[i][1][2]  # type: ignore[index]
        assert ("fdatasync", moved) in events[:i]
    writes = [i for i, (kind, _) in enumerate(events) if kind == "pwrite"]
    assert len(writes) == len(files) and max(writes) < min(datasyncs), "written, then synced"


def _on_a_disk(path: Path) -> None:
    """O_DIRECT bypasses the page cache only where the page cache is not the storage."""
    from tbhub.core.fstype import filesystem_type

    if filesystem_type(path) in ("tmpfs", "ramfs"):
        pytest.skip(f"{path} is in memory: its page cache is the storage")


def test_a_large_chunk_goes_to_the_disk_past_the_page_cache_its_tail_through_it(
    run_fd: int, run_dir: Path
) -> None:
    """A chunk of 1 MiB or more at a block-aligned offset is written with O_DIRECT, the
    page cache's copy skipped; what is not whole blocks, and a chunk at an unaligned
    offset, go through the page cache as before. The bytes are the same either way."""
    from tests.support.page_cache import cached_pages

    _on_a_disk(run_dir)
    first, second = os.urandom((2 << 20) + 100), os.urandom((3 << 19) + 7)
    assert put(run_fd, "model.pt", 0, first) == len(first)
    assert put(run_fd, "model.pt", len(first), second, complete=True) == len(first + second)
    cached = cached_pages(run_dir / "model.pt")
    direct_pages = (2 << 20) // 4096
    assert not any(cached[:direct_pages]), "the aligned 2 MiB went through the page cache"
    assert all(cached[direct_pages:]), "the tail and the unaligned chunk are buffered"
    assert (run_dir / "model.pt").read_bytes() == first + second


def test_a_direct_write_is_synced_before_the_file_is_renamed_and_answered(
    run_fd: int, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """O_DIRECT is not durability: the fdatasync after the chunk still carries the device's
    write cache and the file's size, before the rename and before the call returns."""
    import fcntl

    _on_a_disk(run_dir)
    events: list[str] = []
    real_pwrite, real_fdatasync, real_rename = os.pwrite, os.fdatasync, os.rename

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        direct = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT
        events.append("pwrite-direct" if direct else "pwrite")
        return real_pwrite(fd, data, offset)

    def fdatasync(fd: int) -> None:
        events.append("fdatasync")
        real_fdatasync(fd)

    def rename(src: str, dst: str, **kwargs: int) -> None:
        events.append("rename")
        real_rename(src, dst, **kwargs)

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "rename", rename)
    data = os.urandom((1 << 20) + 5)
    assert put(run_fd, "model.pt", 0, data, complete=True) == len(data)
    assert events == ["pwrite-direct", "pwrite", "fdatasync", "rename"], events
    assert (run_dir / "model.pt").read_bytes() == data


@pytest.mark.parametrize("refused_at", ["F_SETFL", "pwrite"])
def test_a_filesystem_refusing_o_direct_gets_the_buffered_write(
    run_fd: int, run_dir: Path, monkeypatch: pytest.MonkeyPatch, refused_at: str
) -> None:
    """EINVAL from the filesystem (no O_DIRECT there, or not at this alignment), when the
    flag is set or at the first write: the whole chunk goes through the page cache."""
    import errno
    import fcntl

    from tbhub.storage import upload_io

    real_fcntl, real_pwrite = fcntl.fcntl, os.pwrite

    def refusing_fcntl(fd: int, command: int, arg: int = 0) -> int:
        if refused_at == "F_SETFL" and command == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "no O_DIRECT here")
        return real_fcntl(fd, command, arg)

    def refusing_pwrite(fd: int, data: bytes, offset: int) -> int:
        if refused_at == "pwrite" and real_fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, "not at this alignment")
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(upload_io.fcntl, "fcntl", refusing_fcntl)
    monkeypatch.setattr(os, "pwrite", refusing_pwrite)
    data = os.urandom(3 << 20)
    assert put(run_fd, "model.pt", 0, data, complete=True) == len(data)
    assert (run_dir / "model.pt").read_bytes() == data


def test_a_chunk_arrives_in_pieces_put_together_once_and_checked_before_a_byte_is_written(
    tmp_path: Path,
) -> None:
    """The body's pieces go to the worker as they arrived; a checkpoint's chunk is put
    together in the thread's aligned buffer and written from there (past the page cache),
    the next chunk reusing that buffer leaves the first one's bytes alone, a retried chunk
    is recognised from it, and a chunk failing its digest leaves nothing."""
    import hashlib

    from tbhub.core.errors import ChecksumMismatch
    from tbhub.storage.quota_ledger import QuotaLedger
    from tbhub.storage.receive import UploadTarget, receive_chunk
    from tbhub.storage.usage import ProjectUsage
    from tests.support.page_cache import cached_pages

    _on_a_disk(tmp_path)
    (tmp_path / "p").mkdir()
    target = UploadTarget(
        tmp_path, "p", "run-1", None, 0, ProjectUsage(tmp_path, QuotaLedger(tmp_path / "ledger"))
    )

    def send(offset: int, pieces: list[bytes], complete: bool, digest: bytes | None = None) -> int:
        sha256 = digest or hashlib.sha256(b"".join(pieces)).digest()
        state = receive_chunk(target, ["model.pt"], offset=offset, pieces=pieces,
                              sha256=sha256, complete=complete)  # fmt: skip
        return state.offset

    first = [os.urandom(size) for size in (65536, 100_000, (1 << 20) - 165_536)]
    second = [os.urandom(size) for size in (300_000, (1 << 20) - 300_000 + 17)]
    bad = [os.urandom(1 << 20)]
    with pytest.raises(ChecksumMismatch):
        send(0, bad, False, digest=hashlib.sha256(b"other").digest())
    assert not (tmp_path / "p" / "run-1").exists()
    assert send(0, first, False) == 1 << 20
    assert send(1 << 20, second, True) == (2 << 20) + 17
    stored = tmp_path / "p" / "run-1" / "model.pt"
    assert not any(cached_pages(stored)[: (2 << 20) // 4096])
    before = stored.stat()
    assert send(1 << 20, second, True) == (2 << 20) + 17  # the completing chunk's retry
    assert stored.stat().st_mtime_ns == before.st_mtime_ns, "a retry wrote"
    assert stored.read_bytes() == b"".join(first + second)
