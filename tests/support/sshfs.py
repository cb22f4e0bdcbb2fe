"""A real network filesystem for tests: a directory served by a private OpenSSH server on a
loopback port and mounted over sshfs (FUSE), with ways to break it as NFS breaks.

- `hang()`: the sshfs process is stopped (SIGSTOP); every call on the mount blocks until
  `resume()`, as on a hard NFS mount whose server went away.
- `drop()`: the sshfs process is killed; every call on the mount then fails with ENOTCONN
  ("Transport endpoint is not connected"), as a dropped connection does.
- `slow(stopped, running)`: sshfs is stopped and continued in turn, so each metadata call
  waits up to `stopped` seconds; bounded, and undone by `resume()`.
- `remount()`: after `drop()`, the dead mount is unmounted and mounted again from the same
  server: the mount is back, with everything the server holds.

The sshd and sshfs processes are tracked by PID (each in its own process group) and
stopped by it. Teardown always continues what it stopped, then unmounts (`fusermount3 -u`,
`-uz`, then a lazy `umount -l`), even when the test failed: a FUSE mount left stuck breaks
the host for every other test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.support.sshd_keys import SSHD, write_sshd_files

FUSERMOUNT = shutil.which("fusermount3") or shutil.which("fusermount") or "fusermount"


def sshfs_available() -> str | None:
    """Why a real sshfs mount cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (the private sshd and allow_other)"
    if not Path(SSHD).exists() or shutil.which("sshfs") is None:
        return "needs openssh-server and sshfs (deploy/install-system-deps.sh test)"
    if not Path("/dev/fuse").exists():
        return "needs /dev/fuse"
    return None


def skip_without_sshfs() -> None:
    """Skip the calling test where a real sshfs mount cannot be made (sshfs_available says
    why); on CI, which installs sshfs and runs as root, it never skips."""
    reason = sshfs_available()
    if reason:
        pytest.skip(reason)


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts if len(line.split()) > 2)


@dataclass
class SshfsMount:
    """A mounted directory and the processes behind it."""

    mountpoint: Path  # where the test (and tbhub) reads and writes
    backing: Path  # the directory the server serves: what "another client" writes
    sshd: subprocess.Popen[bytes]
    sshfs: subprocess.Popen[bytes]
    _mount: Callable[[], subprocess.Popen[bytes]]  # starts sshfs on the mountpoint
    _stopped: bool = False
    _cycler: threading.Thread | None = None
    _cycling: threading.Event = field(default_factory=threading.Event)

    def hang(self) -> None:
        """Stop sshfs: calls on the mount block (a hung mount) until resume()."""
        self._stopped = True
        os.kill(self.sshfs.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Undo hang() and slow(): sshfs runs again."""
        self._cycling.clear()
        if self._cycler is not None:
            self._cycler.join(timeout=10)
            self._cycler = None
        if self.sshfs.poll() is None:
            os.kill(self.sshfs.pid, signal.SIGCONT)
        self._stopped = False

    def drop(self) -> None:
        """Kill sshfs: calls on the mount fail with ENOTCONN (the connection dropped)."""
        if self.sshfs.poll() is None:
            os.kill(self.sshfs.pid, signal.SIGCONT)
            os.kill(self.sshfs.pid, signal.SIGKILL)
            self.sshfs.wait(timeout=10)
        self._stopped = False

    def remount(self) -> None:
        """Undo drop(): the dead mount unmounted, then sshfs started again on it."""
        _stop(self.sshfs)
        unmount(self.mountpoint)
        self.sshfs = self._mount()

    def slow(self, stopped: float = 0.2, running: float = 0.05) -> None:
        """Stop and continue sshfs in turn, `stopped` then `running` seconds, until
        resume(): each metadata call waits for the next running spell."""
        self._cycling.set()

        def cycle() -> None:
            while self._cycling.is_set() and self.sshfs.poll() is None:
                os.kill(self.sshfs.pid, signal.SIGSTOP)
                time.sleep(stopped)
                os.kill(self.sshfs.pid, signal.SIGCONT)
                time.sleep(running)

        self._cycler = threading.Thread(target=cycle, name="sshfs-slow", daemon=True)
        self._cycler.start()


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


def _wait(condition: object, what: str, alive: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while not condition():  # type: ignore[operator]
        if alive.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not come up: {log.read_text(errors='replace')}")
        time.sleep(0.05)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGCONT then SIGTERM the process's group, SIGKILL after 10 s; by its PID only."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGCONT)
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def unmount(path: Path) -> None:
    """Unmount, lazily if need be; never raises (teardown must go on)."""
    for command in ([FUSERMOUNT, "-u", str(path)], [FUSERMOUNT, "-uz", str(path)],
                    ["umount", "-l", str(path)]):  # fmt: skip
        if not is_mounted(path):
            return
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(command, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def sshfs_mount(
    work: Path, *, at: Path | None = None, dir_cache: bool = False
) -> Iterator[SshfsMount]:
    """`work`/served mounted at `at` (default `work`/mnt, made if missing) over sshfs from a
    private sshd on loopback.
    The directory cache is off unless asked for, so what another client writes shows at
    the next listing (sshfs's default keeps listings 20 s)."""
    keys = work / "ssh"
    port = free_port()
    config = write_sshd_files(keys, port)
    backing, mountpoint = work / "served", at or work / "mnt"
    backing.mkdir()
    mountpoint.mkdir(parents=True, exist_ok=True)
    sshd_log, sshfs_log = keys / "sshd.log", keys / "sshfs.log"
    with open(sshd_log, "wb") as log:
        sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    mount: SshfsMount | None = None
    options = [
        f"IdentityFile={keys / 'client'}", "BatchMode=yes", "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null", "LogLevel=ERROR", "allow_other",
        f"dir_cache={'yes' if dir_cache else 'no'}",
    ]  # fmt: skip

    def start_sshfs() -> subprocess.Popen[bytes]:
        with open(sshfs_log, "ab") as log:
            started = subprocess.Popen(
                ["sshfs", "-f", "-p", str(port), "-o", ",".join(options),
                 f"root@127.0.0.1:{backing}", str(mountpoint)],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        try:
            _wait(lambda: is_mounted(mountpoint), "the sshfs mount", started, sshfs_log)
        except BaseException:
            _stop(started)
            raise
        return started

    try:
        _wait(lambda: _listening(port), "the private sshd", sshd, sshd_log)
        mount = SshfsMount(mountpoint, backing, sshd, start_sshfs(), start_sshfs)
        yield mount
    finally:
        if mount is not None:
            mount._cycling.clear()
            if mount._cycler is not None:
                mount._cycler.join(timeout=10)
            if mount.sshfs.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(mount.sshfs.pid, signal.SIGCONT)  # never leave it stopped
        unmount(mountpoint)
        if mount is not None:
            _stop(mount.sshfs)
        _stop(sshd)
        unmount(mountpoint)


@pytest.fixture
def sshfs(tmp_path: Path) -> Iterator[SshfsMount]:
    """A fresh sshfs mount for one test (skipped where sshfs cannot run)."""
    skip_without_sshfs()
    with sshfs_mount(tmp_path / "sshfs") as mount:
        yield mount
