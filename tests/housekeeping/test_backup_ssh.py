"""Backups to user@host:path through a real sshd that the test starts on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.settings import Settings
from tbhub.housekeeping import backup
from tests.housekeeping.conftest import fill_storage, tree_digest
from tests.housekeeping.test_backup import age_by_a_day
from tests.ports import free_port
from tests.support.sshd_keys import SSHD, write_sshd_files


@pytest.fixture
def ssh_target(tmp_path: Path, jobs_settings: Settings) -> Iterator[Path]:
    """An sshd on a loopback port that lets root in with a key made for this test; the
    settings point the backup at root@127.0.0.1:<tmp>/remote. Stopped by its PID."""
    if not Path(SSHD).exists() or os.geteuid() != 0:
        pytest.skip("needs openssh-server and root")
    keys = tmp_path / "ssh"
    port = free_port()
    config = write_sshd_files(keys, port)
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE,
                              start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            time.sleep(0.05)
        remote = tmp_path / "remote"
        jobs_settings.backup_target = f"root@127.0.0.1:{remote}"
        jobs_settings.backup_ssh_command = (
            f"ssh -p {port} -i {keys / 'client'} -o BatchMode=yes -o ConnectTimeout=5 "
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
        )
        yield remote
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        if server.stderr:
            server.stderr.close()


def test_snapshots_over_ssh_verify_and_restore_byte_identical(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    ssh_target: Path,
    tmp_path: Path,
) -> None:
    fill_storage(jobs_settings, runs=3)
    first = backup.run_backup(factory, jobs_settings, actor="t").snapshot
    assert tree_digest(ssh_target / first) == tree_digest(jobs_settings.storage)
    assert (ssh_target / f"{first}.sha256").is_file()
    first = age_by_a_day(ssh_target, first)  # one snapshot a day is kept: keep both
    (jobs_settings.storage / "vision/g/run-0/events.out.tfevents.0.host").write_bytes(b"v2")
    second = backup.run_backup(factory, jobs_settings, actor="t")
    assert second.files == 1 and second.snapshot != first
    unchanged = "vision/g/run-1/events.out.tfevents.0.host"
    linked = (ssh_target / second.snapshot / unchanged).stat()
    assert linked.st_ino == (ssh_target / first / unchanged).stat().st_ino  # --link-dest
    assert backup.verify(factory, jobs_settings, snapshot=None, actor="t") == (second.snapshot, [])
    victim = ssh_target / second.snapshot / "vision/g/run-2/events.out.tfevents.3.host"
    victim.write_bytes(b"!" + victim.read_bytes()[1:])
    assert backup.verify(factory, jobs_settings, snapshot=None, actor="t")[1] == [
        {"path": "vision/g/run-2/events.out.tfevents.3.host", "problem": "changed"}
    ]
    victim.unlink()
    shutil.copy(jobs_settings.storage / "vision/g/run-2/events.out.tfevents.3.host", victim)
    backup.restore(factory, jobs_settings, into=tmp_path / "back", actor="t")
    assert tree_digest(tmp_path / "back") == tree_digest(jobs_settings.storage)
