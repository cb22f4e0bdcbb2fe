"""An upload whose project is a real sshfs mount (tests/support/sshfs.py) that drops under
it: storage/receive.py answers StorageUnavailable, and the quota's ledger is left right."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbhub.core.errors import StorageUnavailable
from tbhub.storage.quota_ledger import Decision, QuotaLedger
from tbhub.storage.receive import UploadTarget, file_state, list_files, receive_chunk
from tbhub.storage.usage import ProjectUsage
from tests.support.sshfs import SshfsMount, skip_without_sshfs, sshfs_mount

QUOTA = 1 << 30


class DropsOnceLetIn(ProjectUsage):
    """The real ledger, and the mount dropped right after it lets the chunk in: the moment
    between the reservation and the write."""

    def __init__(self, storage_root: Path, ledger: QuotaLedger, mount: SshfsMount) -> None:
        super().__init__(storage_root, ledger)
        self.mount = mount

    def reserve(self, project: str, size: int, quota: int) -> Decision:
        decision = super().reserve(project, size, quota)
        self.mount.drop()
        return decision


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[tuple[Path, SshfsMount]]:
    """A storage root whose project `p` is an sshfs mount holding run-1."""
    skip_without_sshfs()
    storage = tmp_path / "storage"
    with sshfs_mount(tmp_path / "nfs", at=storage / "p") as mount:
        (mount.backing / "run-1").mkdir()
        yield storage, mount


def test_reads_of_a_dropped_mount_are_storage_unavailable(
    remote: tuple[Path, SshfsMount], tmp_path: Path
) -> None:
    storage, mount = remote
    usage = ProjectUsage(storage, QuotaLedger(tmp_path / "ledger"))
    target = UploadTarget(storage, "p", "run-1", None, 0, usage)
    mount.drop()
    with pytest.raises(StorageUnavailable, match="once the mount is back"):
        list_files(target)
    with pytest.raises(StorageUnavailable, match="once the mount is back"):
        file_state(target, ["a.bin"])


def test_a_write_that_loses_its_mount_once_let_in_is_unavailable_and_settles_its_bytes(
    remote: tuple[Path, SshfsMount], tmp_path: Path
) -> None:
    storage, mount = remote
    ledger = QuotaLedger(tmp_path / "ledger", ttl=0)  # every reservation walks
    target = UploadTarget(storage, "p", "run-1", QUOTA, 0, DropsOnceLetIn(storage, ledger, mount))
    data = os.urandom(4096)
    with pytest.raises(StorageUnavailable, match="once the mount is back"):
        receive_chunk(target, ["model.pt"], offset=0, pieces=[data],
                      sha256=hashlib.sha256(data).digest(), complete=True)  # fmt: skip
    mount.remount()
    assert list((mount.backing / "run-1").iterdir()) == []  # nothing of it written
    # Its bytes count no longer than to the next walk: none is left in flight for good.
    usage = ProjectUsage(storage, ledger)
    assert usage.reserve("p", 0, QUOTA).used == 0
    send = UploadTarget(storage, "p", "run-1", QUOTA, 0, usage)
    receive_chunk(send, ["model.pt"], offset=0, pieces=[data],
                  sha256=hashlib.sha256(data).digest(), complete=True)  # fmt: skip
    assert (mount.backing / "run-1" / "model.pt").read_bytes() == data
