"""The storage root on a real network filesystem: a directory mounted over sshfs from a
private sshd on loopback (tests/support/sshfs.py), and the ways it breaks."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from tbhub.core.errors import ConfigError
from tbhub.core.fstype import (
    filesystem_type,
    is_mount_lost,
    is_network_filesystem,
    network_mounts_below,
)
from tbhub.core.settings import Settings, prepare_runtime
from tests.support.sshfs import (  # noqa: F401  (sshfs: the fixture)
    SshfsMount,
    skip_without_sshfs,
    sshfs,
    sshfs_mount,
)


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (OSError(errno.ENOTCONN, "Transport endpoint is not connected"), True),
        (OSError(errno.ESTALE, "Stale file handle"), True),
        (OSError(errno.EIO, "Input/output error"), True),
        (TimeoutError(), True),
        (FileNotFoundError(errno.ENOENT, "No such file or directory"), False),
        (PermissionError(errno.EACCES, "Permission denied"), False),
        (ValueError("not an OSError"), False),
    ],
)
def test_a_dropped_or_stale_mount_is_told_from_a_missing_path(
    error: BaseException, lost: bool
) -> None:
    assert is_mount_lost(error) is lost


def test_an_sshfs_mount_is_a_network_filesystem(sshfs: SshfsMount, tmp_path: Path) -> None:  # noqa: F811
    assert filesystem_type(sshfs.mountpoint) == "fuse.sshfs"
    assert is_network_filesystem(sshfs.mountpoint / "some" / "project")
    assert not is_network_filesystem(tmp_path)


def test_network_mounts_below_a_local_root_are_found_from_the_mount_table(
    tmp_path: Path,
) -> None:
    skip_without_sshfs()
    root = tmp_path / "storage"
    with sshfs_mount(tmp_path / "nfs", at=root / "vision" / "shared") as mount:
        (root / "local").mkdir()
        assert network_mounts_below(root) == [mount.mountpoint]
        assert network_mounts_below(root / "local") == []
        mount.hang()  # the table alone is read: a hung mount costs nothing
        try:
            assert network_mounts_below(root) == [mount.mountpoint]
        finally:
            mount.resume()


def test_what_another_client_writes_shows_through_the_mount(sshfs: SshfsMount) -> None:  # noqa: F811
    (sshfs.backing / "vision").mkdir()
    (sshfs.backing / "vision" / "events.out").write_bytes(b"x" * 10)
    assert os.listdir(sshfs.mountpoint / "vision") == ["events.out"]
    assert (sshfs.mountpoint / "vision" / "events.out").stat().st_size == 10


def test_a_hung_mount_blocks_reads_until_it_resumes(sshfs: SshfsMount) -> None:  # noqa: F811
    (sshfs.backing / "vision").mkdir()
    sshfs.hang()
    seen: list[list[str]] = []
    reader = threading.Thread(target=lambda: seen.append(os.listdir(sshfs.mountpoint / "vision")))
    reader.start()
    reader.join(timeout=1.0)
    assert reader.is_alive() and not seen
    sshfs.resume()
    reader.join(timeout=30)
    assert seen == [[]]


def test_a_dropped_mount_fails_with_enotconn(sshfs: SshfsMount) -> None:  # noqa: F811
    (sshfs.backing / "vision").mkdir()
    sshfs.drop()
    with pytest.raises(OSError) as raised:
        os.listdir(sshfs.mountpoint / "vision")
    assert raised.value.errno == errno.ENOTCONN
    assert is_mount_lost(raised.value)


def test_slow_metadata_still_answers(sshfs: SshfsMount) -> None:  # noqa: F811
    (sshfs.backing / "vision").mkdir()
    sshfs.slow(stopped=0.2, running=0.05)
    try:
        for _ in range(3):
            assert os.listdir(sshfs.mountpoint) == ["vision"]
    finally:
        sshfs.resume()


def test_sqlite_refuses_a_data_dir_on_a_real_sshfs_mount(
    sshfs: SshfsMount,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in list(os.environ):
        if key.startswith("TBHUB_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "tbhub.toml"))
    with pytest.raises(ConfigError, match=r"data dir .* is on a network filesystem"):
        prepare_runtime(Settings(data_dir=sshfs.mountpoint / "data"))
    # The same settings on a local disk start.
    prepare_runtime(Settings(data_dir=tmp_path / "data"))
