"""Child processes and waiting for them: each started in its own session and stopped by
process group, never by name; polling until one answers over HTTP; and a bare TensorBoard
on a logdir, what the benchmarks compare tbhub with."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from _places import HOST, TENSORBOARD_BIN, free_port
from tbhub.core.processes import ProcessRef, stop_group

# -- processes --------------------------------------------------------------------------------


@dataclass
class Group:
    """A child started in its own session; its PID is also its process-group id."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ref: ProcessRef

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, sig: signal.Signals = signal.SIGTERM, grace: float = 30.0) -> None:
        """Signal the whole group, then SIGKILL whatever is left after `grace` seconds."""
        stop_group(self.ref, grace=grace, signals=(sig, signal.SIGKILL))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def spawn(
    name: str, command: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None
) -> Group:
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return Group(name=name, process=process, log_path=log_path, ref=ProcessRef.of(process.pid))


def timed(command: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Seconds `command` takes to run to its end, its output discarded; a failure raises."""
    started = time.perf_counter()
    subprocess.run(list(command), env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- HTTP -------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    alive: Callable[[], bool] = lambda: True,
) -> float:
    """Call `predicate` every `interval` s until it holds; return the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if predicate():
            return time.monotonic() - started
        if not alive():
            raise RuntimeError(f"the process died while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def runs_listed(client: httpx.Client, url: str, expected: Sequence[str]) -> Callable[[], bool]:
    """A predicate: GET `url` answers 200 with a JSON list holding every expected run."""
    want = set(expected)

    def check() -> bool:
        try:
            response = client.get(url)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        try:
            runs = response.json()
        except ValueError:
            return False
        return isinstance(runs, list) and want <= set(runs)

    return check


def answers_200(client: httpx.Client, url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return client.get(url).status_code == 200
        except httpx.HTTPError:
            return False

    return check


# -- bare TensorBoard -------------------------------------------------------------------------


def bare_tensorboard(logdir: Path, port: int, log_path: Path) -> Group:
    """`tensorboard --logdir <logdir> --load_fast=true --port <port> --host 127.0.0.1`."""
    command = [
        TENSORBOARD_BIN,
        "--logdir", str(logdir),
        "--load_fast=true",
        "--port", str(port),
        "--host", HOST,
    ]  # fmt: skip
    return spawn("tensorboard", command, log_path=log_path)


def ready_bare_tensorboard(
    logdir: Path, names: Sequence[str], log_path: Path, *, timeout: float, interval: float = 0.05,
    port: int | None = None,
) -> tuple[Group, float]:  # fmt: skip
    """A bare TensorBoard on `logdir` (on `port`, or a free one) once its /data/runs lists
    every run in `names`, and the seconds from spawning it to that answer. Stopped if it
    does not get there."""
    port = port or free_port()
    url = f"http://{HOST}:{port}/data/runs"
    started = time.monotonic()
    board = bare_tensorboard(logdir, port, log_path)
    try:
        with httpx.Client(timeout=5.0) as client:
            what = f"bare TensorBoard to list {len(names)} runs"
            wait_for(runs_listed(client, url, names), timeout=timeout, what=what,
                     interval=interval, alive=board.alive)  # fmt: skip
        return board, time.monotonic() - started
    except BaseException as exc:
        board.stop()
        if isinstance(exc, RuntimeError):
            raise RuntimeError(f"{exc}; its log ends:\n{board.log_tail()}") from None
        raise
