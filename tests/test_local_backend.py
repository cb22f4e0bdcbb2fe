"""The local subprocess backend with real processes: start, list, stop, adopt, reap."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest

from tbhub.core.processes import ProcessRef
from tbhub.storage.sample_logs import write_run
from tbhub.supervisor.backends.local import BoardState, LocalBackend
from tbhub.supervisor.observe import Observer, probe_ready
from tbhub.supervisor.plan import Instance
from tbhub.supervisor.state import board_spec
from tests.scripts import write_script

STUBBORN = """\
import signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("TensorBoard 0.0 at http://127.0.0.1:1/ (Press CTRL+C to quit)", flush=True)
time.sleep(600)
"""


def make_backend(tmp_path: Path, binary: str | None, grace: float = 5.0) -> LocalBackend:
    return LocalBackend(
        state_dir=tmp_path / "boards", owner=str(tmp_path), tensorboard_bin=binary, stop_grace=grace
    )


@pytest.fixture
def cleanup() -> Iterator[list[LocalBackend]]:
    backends: list[LocalBackend] = []
    yield backends
    for backend in backends:
        for instance in backend.list_instances():
            backend.stop(instance)


def wait_for(backend: LocalBackend, predicate: str, timeout: float = 60) -> Instance:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            for instance in backend.list_instances():
                if predicate == "upstream" and instance.upstream:
                    return instance
                if predicate == "ready" and probe_ready(instance, client):
                    return instance
            time.sleep(0.1)
    raise AssertionError(f"no instance became {predicate}")


def test_tensorboard_starts_listens_on_loopback_and_stops(
    tmp_path: Path, cleanup: list[LocalBackend]
) -> None:
    write_run(tmp_path / "storage" / "p" / "run", steps=5, tags=1)
    backend = make_backend(tmp_path, None)  # tbhub's launcher
    cleanup.append(backend)
    started = backend.start(board_spec("p", str(tmp_path / "storage")))
    ready = wait_for(backend, "ready")
    assert ready.instance_id == started.instance_id
    assert ready.upstream is not None and ready.upstream.startswith("127.0.0.1:")
    leader = _pid(backend, ready)
    assert os.getpgid(leader) == leader, "each board leads its own process group"
    assert os.getsid(leader) == leader, "each board has its own session"
    assert backend.memory_bytes(ready) > 10 * 1024 * 1024

    group = ProcessRef.of(leader).group_members()
    assert len(group) >= 2, "TensorBoard and its data server"
    backend.stop(ready)
    assert backend.list_instances() == []
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in group)


def test_stop_escalates_to_sigkill_when_int_and_term_are_ignored(
    tmp_path: Path, cleanup: list[LocalBackend]
) -> None:
    script = write_script(tmp_path / "stubborn-tensorboard", STUBBORN)
    backend = make_backend(tmp_path, str(script), grace=0.5)
    cleanup.append(backend)
    backend.start(board_spec("p", str(tmp_path)))
    instance = wait_for(backend, "upstream", timeout=10)
    process = psutil.Process(_pid(backend, instance))
    began = time.monotonic()
    backend.stop(instance)
    assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    elapsed = time.monotonic() - began
    assert elapsed >= 1.0, "INT and TERM each get their 0.5 s grace before KILL"
    assert elapsed < 5.0, "KILL ends it without waiting further"


def test_a_second_backend_adopts_what_the_first_started(
    tmp_path: Path, cleanup: list[LocalBackend]
) -> None:
    script = write_script(tmp_path / "stubborn-tensorboard", STUBBORN)
    first = make_backend(tmp_path, str(script), grace=0.2)
    started = first.start(board_spec("p", str(tmp_path)))
    successor = make_backend(tmp_path, str(script), grace=0.2)
    cleanup.append(successor)
    assert [i.instance_id for i in successor.list_instances()] == [started.instance_id]
    assert successor.reap_unknown() == []
    successor.stop(successor.list_instances()[0])
    assert first.list_instances() == []  # also collects the exit status of first's child


LISTENING = """\
import time
print("TensorBoard 0.0 at http://127.0.0.1:1/ (Press CTRL+C to quit)", flush=True)
time.sleep(600)
"""


class ReadsCounted(LocalBackend):
    """The local backend, noting which boards' state files it reads."""

    read: list[str]

    def _read_state(self, instance_id: str) -> BoardState | None:
        self.read.append(instance_id)
        return super()._read_state(instance_id)


def test_relisting_the_starting_boards_reads_only_theirs(
    tmp_path: Path, cleanup: list[LocalBackend]
) -> None:
    """While a board starts, the supervisor lists it again every few milliseconds to learn
    its address (Observer.relisted): that looks at the boards it waits for, not at all."""
    script = write_script(tmp_path / "listening-tensorboard", LISTENING)
    backend = ReadsCounted(state_dir=tmp_path / "boards", owner=str(tmp_path),
                           tensorboard_bin=str(script), stop_grace=2.0)  # fmt: skip
    cleanup.append(backend)
    others = [backend.start(board_spec(p, str(tmp_path))) for p in ("p", "q", "r")]
    starting = backend.start(board_spec("s", str(tmp_path)))
    deadline = time.monotonic() + 10
    with ThreadPoolExecutor(1) as pool:
        observer = Observer(backend, pool, probe_timeout=1.0)
        relisted: list[Instance] = []
        while not relisted or relisted[0].upstream is None:
            assert time.monotonic() < deadline, "the board never printed its address"
            backend.read = []
            relisted = observer.relisted([starting])
            assert backend.read == [starting.instance_id], "no other board's state is read"
        observer.close()
    assert [i.instance_id for i in relisted] == [starting.instance_id]
    assert relisted[0].upstream == "127.0.0.1:1"
    listed = {i.instance_id for i in backend.list_instances()}
    assert listed == {i.instance_id for i in [*others, starting]}, "a full listing sees all"


def test_a_recycled_pid_is_not_ours(tmp_path: Path) -> None:
    me = psutil.Process()
    assert ProcessRef(me.pid, me.create_time()).is_alive()
    assert not ProcessRef(me.pid, me.create_time() - 100).is_alive()


def _pid(backend: LocalBackend, instance: Instance) -> int:
    state = backend._read_state(instance.instance_id)
    assert state is not None
    return state.pid
