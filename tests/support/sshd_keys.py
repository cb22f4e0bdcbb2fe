"""The keys and config of a private sshd on a loopback port that lets root in with a key
made for it: what the ssh-backup tests and the sshfs mount (support/sshfs.py) start."""

from __future__ import annotations

import subprocess
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def write_sshd_files(keys: Path, port: int) -> Path:
    """Host and client keys, authorized_keys and sshd_config in `keys` (made, mode 0700);
    the config's path. The client key is `keys`/client."""
    keys.mkdir(parents=True, mode=0o700)
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)],
                       check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    (keys / "authorized_keys").write_text((keys / "client.pub").read_text())
    config = keys / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\n"
        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nPidFile {keys / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n"
        "StrictModes no\nSubsystem sftp internal-sftp\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    return config
