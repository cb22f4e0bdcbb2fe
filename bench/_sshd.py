"""A private OpenSSH server on a loopback port, for benchmarks whose anchor is `rsync` over
ssh: its own host key, config and authorized key in a scratch directory, started as a
tracked process group and stopped with it. It lets in only the key made for it, as the
user running the benchmark."""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from _places import HOST, free_port
from _processes import Group, spawn, wait_for

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclass(frozen=True)
class Ssh:
    """How to reach the private server: the `-e` command rsync runs."""

    port: int
    key: Path

    def command(self) -> list[str]:
        return ["ssh", "-p", str(self.port), "-i", str(self.key), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "IdentitiesOnly=yes"]  # fmt: skip

    def rsync_shell(self) -> str:
        return " ".join(self.command())

    @property
    def target(self) -> str:
        return f"{getpass.getuser()}@{HOST}"


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.2):
        return True
    return False


@contextlib.contextmanager
def private_sshd(work: Path) -> Iterator[Ssh]:
    """sshd on a free loopback port with everything it needs under `work`; stopped on exit."""
    work.mkdir(parents=True, exist_ok=True)
    host_key, user_key = work / "host_ed25519", work / "user_ed25519"
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                       check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    (work / "authorized_keys").write_text(user_key.with_suffix(".pub").read_text())
    port = free_port()
    config = work / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress {HOST}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {work / 'authorized_keys'}\nPidFile {work / 'sshd.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\n"
        f"AllowUsers {getpass.getuser()}\nSubsystem sftp internal-sftp\n"
    )
    # sshd insists on its privilege-separation directory even when it never drops to it.
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    server: Group = spawn("sshd", [SSHD, "-D", "-e", "-f", str(config)],
                          log_path=work / "sshd.log")  # fmt: skip
    try:
        wait_for(lambda: _listening(port), timeout=15, what="the private sshd",
                 alive=server.alive)  # fmt: skip
        ssh = Ssh(port, user_key)
        subprocess.run([*ssh.command(), ssh.target, "true"], check=True, timeout=30,
                       stdin=subprocess.DEVNULL)  # fmt: skip
        yield ssh
    finally:
        server.stop(grace=5)
