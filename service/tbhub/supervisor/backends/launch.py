"""How the local backend puts a board process into the world: exec it, or fork the zygote.

Both launchers take the same argv, log path and labels and leave the same thing behind: a
process that leads its own session, writes to its log and carries TBHUB_OWNER/TBHUB_INSTANCE
in its environment. ExecLauncher runs a fresh interpreter (`tensorboard ...`).
ZygoteLauncher asks the board zygote (`tbhub.supervisor.zygote`) to fork one, which skips
Python start-up, TensorBoard's imports and its asset compression, and shares those pages
copy-on-write; it keeps the zygote running. It execs what does not run on tbhub's own
interpreter (another TensorBoard, a binary), and anything while no zygote answers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tbhub.core.processes import ProcessRef, stop_group
from tbhub.supervisor import forked_board, zygote

log = logging.getLogger("tbhub.supervisor")

ZYGOTE_READY_TIMEOUT = 60.0
ZYGOTE_REPLY_TIMEOUT = 30.0
MAX_ZYGOTE_BACKOFF = 300.0
# The zygote only forks; a zygote that lived this long was not crashing at start-up.
ZYGOTE_HEALTHY_AFTER = 30.0


def zygote_backoff(failures: int) -> float:
    """Seconds before starting a zygote again after `failures` early deaths: 0, 1, 2, 4 ..."""
    return 0.0 if failures == 0 else min(2.0 ** (failures - 1), MAX_ZYGOTE_BACKOFF)


@dataclass(frozen=True)
class Launched:
    ref: ProcessRef
    launcher: str  # "exec" or "zygote"
    child: subprocess.Popen[bytes] | None = None  # exec: our child, to be reaped by polling


class Launcher(Protocol):
    def launch(
        self, argv: Sequence[str], *, log_path: Path, labels: Mapping[str, str]
    ) -> Launched: ...

    def maintain(self) -> None:
        """Called on every supervisor pass: keep helper processes alive."""
        ...

    def close(self) -> None: ...


class ExecLauncher:
    def launch(self, argv: Sequence[str], *, log_path: Path, labels: Mapping[str, str]) -> Launched:
        with open(log_path, "wb") as log_file:
            child = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, **labels},
                start_new_session=True,
                close_fds=True,
            )
        return Launched(ref=ProcessRef.of(child.pid), launcher="exec", child=child)

    def maintain(self) -> None:
        pass

    def close(self) -> None:
        pass


class ZygoteUnavailable(RuntimeError):
    pass


class ZygoteLauncher:
    """Runs the zygote for one data dir and asks it for boards.

    `widest_labels` are the longest labels a board will carry; the zygote's environment
    block reserves room for them (see forked_board.relabel_environ).
    """

    def __init__(
        self,
        *,
        directory: Path,
        state_dir: Path,
        widest_labels: Mapping[str, str],
        ready_timeout: float = ZYGOTE_READY_TIMEOUT,
    ) -> None:
        self.directory = directory
        self.state_dir = state_dir
        self.slot_width = forked_board.slot_width(widest_labels, spare=64)
        self.ready_timeout = ready_timeout
        self.fallback = ExecLauncher()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._failures = 0
        self._retry_at = 0.0

    @property
    def state_path(self) -> Path:
        return self.directory / "zygote.json"

    @property
    def log_path(self) -> Path:
        return self.directory / "zygote.log"

    def launch(self, argv: Sequence[str], *, log_path: Path, labels: Mapping[str, str]) -> Launched:
        try:
            return self._fork(argv, log_path=log_path, labels=labels)
        except ZygoteUnavailable as exc:
            log.warning("board zygote unavailable (%s); starting %s with exec", exc, log_path.stem)
            return self.fallback.launch(argv, log_path=log_path, labels=labels)

    def maintain(self) -> None:
        with self._lock:
            try:
                self._ensure_running()
            except ZygoteUnavailable as exc:
                log.debug("board zygote not running: %s", exc)

    def close(self) -> None:
        """Stop the zygote: closing its stdin asks it to exit; signals if it does not."""
        with self._lock:
            process, self._process = self._process, None
            self._retry_at = float("inf")  # no restart from a late pass
        if process is None:
            return
        ref = ProcessRef.of(process.pid) if process.poll() is None else None
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            if ref is not None:
                stop_group(ref, grace=2.0)
            process.wait(timeout=5)
        self.state_path.unlink(missing_ok=True)
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with contextlib.suppress(OSError):  # gone already, or something else by that name
                os.unlink(zygote.SOCKET_NAME, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
        log.info("stopped the board zygote (pid %d)", process.pid)

    # -- the zygote process -------------------------------------------------------------------

    def pid(self) -> int | None:
        """PID of the running zygote, if any."""
        with self._lock:
            process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def _ensure_running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        now = time.monotonic()
        if process is not None:
            lived = now - self._started_at
            self._failures = 0 if lived > ZYGOTE_HEALTHY_AFTER else self._failures + 1
            self._retry_at = now + zygote_backoff(self._failures)
            log.warning(
                "board zygote (pid %d) exited with status %s after %.0fs; its log ends:\n%s",
                process.pid, process.returncode, lived, self._log_tail(),
            )  # fmt: skip
            if process.stdin is not None:
                process.stdin.close()
            self._process = None
        if now < self._retry_at:
            raise ZygoteUnavailable(f"restarting it in {self._retry_at - now:.0f}s")
        self._stop_leftover()
        self._process = self._spawn()
        self._started_at = now
        return self._process

    def _spawn(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-P", "-m", "tbhub.supervisor.zygote",
            "--dir", str(self.directory), "--state-dir", str(self.state_dir),
        ]  # fmt: skip
        env = {**os.environ, forked_board.SLOT_ENV: "x" * self.slot_width}
        with open(self.log_path, "wb") as log_file:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,  # the zygote exits when this closes (we died or closed it)
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        ref = ProcessRef.of(process.pid)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"pid": ref.pid, "create_time": ref.create_time}))
        os.replace(tmp, self.state_path)
        log.info("started the board zygote (pid %d)", process.pid)
        return process

    def _stop_leftover(self) -> None:
        """A zygote left by a `tbhub serve` that died exits when its stdin closes; make sure."""
        try:
            record = json.loads(self.state_path.read_text())
            ref = ProcessRef(pid=int(record["pid"]), create_time=float(record["create_time"]))
        except (OSError, ValueError, KeyError, TypeError):
            return
        if ref.is_alive():
            log.warning("stopping the board zygote a previous tbhub serve left (pid %d)", ref.pid)
            stop_group(ref, grace=2.0, signals=(signal.SIGTERM, signal.SIGKILL))
        self.state_path.unlink(missing_ok=True)

    def _log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- one request ----------------------------------------------------------------------------

    def _fork(self, argv: Sequence[str], *, log_path: Path, labels: Mapping[str, str]) -> Launched:
        with self._lock:
            process = self._ensure_running()
        request = {"argv": list(argv), "log_path": str(log_path), "labels": dict(labels)}
        with self._connect(process) as conn:
            conn.settimeout(ZYGOTE_REPLY_TIMEOUT)
            try:
                conn.sendall(json.dumps(request).encode() + b"\n")
            except OSError as exc:
                raise ZygoteUnavailable(f"could not send the request ({exc})") from None
            reply = _read_reply(conn)
        if "error" in reply:
            raise ZygoteUnavailable(f"the zygote refused: {reply['error']}")
        try:
            ref = ProcessRef(pid=int(reply["pid"]), create_time=float(reply["create_time"]))
        except (KeyError, TypeError, ValueError):
            raise ZygoteUnavailable(f"the zygote answered {reply!r}") from None
        return Launched(ref=ref, launcher="zygote")

    def _connect(self, process: subprocess.Popen[bytes]) -> socket.socket:
        """Connect once the zygote listens (it binds after its imports)."""
        deadline = time.monotonic() + self.ready_timeout
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            while True:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    conn.connect(zygote.socket_address(dir_fd))
                    return conn
                except (FileNotFoundError, ConnectionRefusedError):
                    conn.close()
                if process.poll() is not None:
                    raise ZygoteUnavailable(f"it exited; its log ends:\n{self._log_tail()}")
                if time.monotonic() > deadline:
                    raise ZygoteUnavailable(f"not listening after {self.ready_timeout:.0f}s")
                time.sleep(0.02)
        finally:
            os.close(dir_fd)


def _read_reply(conn: socket.socket) -> dict[str, Any]:
    data = b""
    try:
        while b"\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        reply = json.loads(data)
    except (OSError, ValueError) as exc:
        raise ZygoteUnavailable(f"no answer from the zygote ({exc})") from None
    if not isinstance(reply, dict):
        raise ZygoteUnavailable("the zygote answered something that is not an object")
    return reply
