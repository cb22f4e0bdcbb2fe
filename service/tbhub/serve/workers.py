"""The API workers of one `tbhub serve` (TBHUB_API_WORKERS, `tbhub serve --workers N`):
N - 1 processes beside the first, each answering the control plane's HTTP on a loopback
port of its own that nginx's `tbhub_control_plane` upstream lists with the first one's.

The first process binds each worker's socket before nginx starts, so nginx may connect at
once (the kernel queues until the worker accepts), and hands it over by descriptor with
the worker's settings (serve/api_worker.py). Every worker is tracked by PID and start time
(`api-workers.json` in the data dir), stopped with the server, and killed by the kernel
when the first process dies without stopping them (PR_SET_PDEATHSIG): none is left behind.
A worker that exits while the server runs is started again on the same socket, which the
first process keeps open for it (nginx's requests queue there meanwhile); one that keeps
exiting (RESTART_LIMIT times within RESTART_WINDOW) is left down until that window has
passed, with an error logged, and nginx sends its share to the others meanwhile. A
worker's wish for a board reaches the supervisor through a pipe this module reads; the
other way, a pipe to each worker tells it the supervisor wrote a change (`board_changed`),
so its gate and its starting pages' long-polls see a board ready as the first process's do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from tbhub.core.errors import ConfigError
from tbhub.core.metrics import forget_process
from tbhub.core.processes import ProcessRef, stop_group
from tbhub.core.settings import Settings

log = logging.getLogger("tbhub")

WORKER_STOP_SIGNALS = (signal.SIGTERM, signal.SIGKILL)  # uvicorn drains on SIGTERM
STOP_GRACE = 10.0
READY_SECONDS = 60.0
RECORD = "api-workers.json"
WATCH_SECONDS = 1.0  # between looks at whether a worker has exited
RESTART_LIMIT, RESTART_WINDOW = 5, 60.0  # restarts of one worker within that many seconds


@dataclass(frozen=True)
class WorkerSpec:
    """What `tbhub serve` hands a worker: its settings, the listening socket's descriptor,
    the write end of the wake-up pipe, the read end of its board-changes pipe, and the
    server's name in cache notifications."""

    settings: Settings
    parent: int
    listen_fd: int
    wake_fd: int
    changes_fd: int
    origin: str


def poke(fd: int) -> None:
    """One byte down a non-blocking wake-up pipe. A full pipe has a wake-up pending already;
    a closed one's reader is gone (it ends, or is started again with a new pipe)."""
    with contextlib.suppress(OSError):  # BlockingIOError (full), BrokenPipeError (no reader)
        os.write(fd, b"!")


def bind_loopback(port: int = 0) -> socket.socket:
    """A listening socket on loopback, bound before nginx starts: nginx's first requests
    wait in its queue instead of failing (a refused connection would take the process out
    of nginx's rotation for 10 s). Port 0: one the kernel picks, nothing to clash."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); is another "
                          "server there? Set TBHUB_API_PORT to a free port") from None  # fmt: skip
    sock.listen(2048)
    return sock


class ApiWorkers:
    def __init__(self, settings: Settings, *, wake: Callable[[], None], origin: str) -> None:
        self.settings = settings
        self.wake = wake
        self.origin = origin
        self.record = settings.data_dir / RECORD
        self._sockets = [bind_loopback() for _ in range(settings.api_workers - 1)]
        self.addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in self._sockets]
        self._children: list[tuple[subprocess.Popen[bytes], ProcessRef]] = []
        self._restarts: list[list[float]] = [[] for _ in self._sockets]  # when, per worker
        self._wake_read, self._wake_write = os.pipe()
        # The write end of each worker's board-changes pipe; replaced, under the lock, when
        # the worker is started again (a closed number may be reused by any other file).
        self._changes: list[int] = [-1 for _ in self._sockets]
        self._changes_lock = threading.Lock()
        self._waker: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def refs(self) -> list[ProcessRef]:
        return [ref for _child, ref in self._children]

    def start(self) -> None:
        """Start every worker and wait until each answers; ConfigError if one cannot."""
        stop_stale(self.record)
        if not self._sockets:
            return
        self._waker = threading.Thread(target=self._pass_wakes, name="tbhub-wakes", daemon=True)
        self._waker.start()
        self._children = [self._spawn(index) for index in range(len(self._sockets))]
        self._write_record()
        for (child, _ref), address in zip(self._children, self.addresses, strict=True):
            self._wait_ready(child, address)
        log.info("%d API workers answer beside this process: %s", len(self._children),
                 ", ".join(self.addresses))  # fmt: skip
        # Started from a thread that lives as long as the workers: the kernel's
        # PR_SET_PDEATHSIG acts when the thread that started a child ends.
        self._watcher = threading.Thread(target=self._watch, name="tbhub-api-workers",
                                         daemon=True)  # fmt: skip
        self._watcher.start()

    def _spawn(self, index: int) -> tuple[subprocess.Popen[bytes], ProcessRef]:
        """Worker `index`, answering on its socket (this process keeps its copy open and
        never accepts on it, so a worker started again later listens on the same port), with
        a new board-changes pipe."""
        sock = self._sockets[index]
        changes_read, changes_write = os.pipe()
        os.set_blocking(changes_write, False)
        spec = WorkerSpec(settings=self.settings, parent=os.getpid(), listen_fd=sock.fileno(),
                          wake_fd=self._wake_write, changes_fd=changes_read,
                          origin=self.origin)  # fmt: skip
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "tbhub.serve.api_worker"],
                stdin=subprocess.PIPE,
                pass_fds=(sock.fileno(), self._wake_write, changes_read),
                # A terminal's Ctrl-C reaches `tbhub serve` alone, which stops them in turn.
                start_new_session=True,
            )
        except BaseException:
            os.close(changes_write)
            raise
        finally:
            os.close(changes_read)  # the worker's now
        with self._changes_lock:
            if self._changes[index] >= 0:
                os.close(self._changes[index])
            self._changes[index] = changes_write
        assert child.stdin is not None
        child.stdin.write(pickle.dumps(spec))
        child.stdin.close()
        return child, ProcessRef.of(child.pid)

    def _write_record(self) -> None:
        """Written whole or not at all: a reader never sees half a list."""
        partial = self.record.with_name(f"{RECORD}.partial")
        partial.write_text(json.dumps([ref.__dict__ for ref in self.refs]))
        partial.replace(self.record)

    def _watch(self) -> None:
        """Start again each worker that exits while the server runs."""
        while not self._stopping.wait(WATCH_SECONDS):
            for index, (child, ref) in enumerate(self._children):
                if child.poll() is None or self._stopping.is_set():
                    continue
                now = time.monotonic()
                recent = [t for t in self._restarts[index] if now - t < RESTART_WINDOW]
                if len(recent) >= RESTART_LIMIT:
                    if len(recent) == RESTART_LIMIT:  # said once
                        log.error("the API worker on %s exited %d times within %.0f s; left "
                                  "down (nginx sends its requests to the other processes): "
                                  "see its errors above", self.addresses[index], RESTART_LIMIT,
                                  RESTART_WINDOW)  # fmt: skip
                        recent.append(now)
                    self._restarts[index] = recent
                    continue
                log.warning("the API worker on %s exited (code %s); starting another",
                            self.addresses[index], child.returncode)  # fmt: skip
                forget_process(ref.pid)
                self._restarts[index] = [*recent, now]
                self._children[index] = self._spawn(index)
                self._write_record()

    def _wait_ready(self, child: subprocess.Popen[bytes], address: str) -> None:
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            if child.poll() is not None:
                raise ConfigError(f"an API worker exited at start (code {child.returncode})")
            try:
                if httpx.get(f"http://{address}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise ConfigError(f"the API worker on {address} did not answer in {READY_SECONDS:.0f} s")

    def board_changed(self) -> None:
        """The supervisor wrote a change: a byte to every worker (serve/api_worker.py reads
        the boards again and wakes its waiters)."""
        with self._changes_lock:
            for fd in self._changes:
                if fd >= 0:
                    poke(fd)

    def _pass_wakes(self) -> None:
        """A byte from any worker: someone waits for a board."""
        while True:
            try:
                data = os.read(self._wake_read, 512)
            except OSError:
                return
            if not data:
                return
            try:
                self.wake()
            except Exception:  # the supervisor's timer picks the board up anyway
                log.exception("could not wake the supervisor for an API worker")

    def stop(self) -> None:
        if self._wake_write < 0:
            return  # stopped already
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        for child, ref in self._children:
            stop_group(ref, grace=STOP_GRACE, signals=WORKER_STOP_SIGNALS)
            child.wait(timeout=5)
            forget_process(ref.pid)
        self._children = []
        with self._changes_lock:
            for fd in self._changes:
                if fd >= 0:
                    os.close(fd)
            self._changes = [-1 for _ in self._sockets]
        self.record.unlink(missing_ok=True)
        for sock in self._sockets:
            sock.close()
        os.close(self._wake_write)  # with the workers gone, the reader sees the pipe's end
        if self._waker is not None:
            self._waker.join(timeout=5)
        os.close(self._wake_read)
        self._wake_write = self._wake_read = -1


def stop_stale(record: Path) -> None:
    """Stop API workers a previous `tbhub serve` on this data dir left (it was killed before
    the kernel's PR_SET_PDEATHSIG could act, or on a host without it)."""
    try:
        refs = [ProcessRef(**entry) for entry in json.loads(record.read_text())]
    except (OSError, ValueError, TypeError):
        return
    for ref in refs:
        if ref.is_alive():
            stop_group(ref, grace=STOP_GRACE, signals=WORKER_STOP_SIGNALS)
    record.unlink(missing_ok=True)
