"""Boards forked from the zygote, with a real zygote, real TensorBoard and real event files."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import tensorboard

from tbhub.core.processes import ProcessRef, stop_group
from tbhub.core.settings import Settings
from tbhub.storage.sample_logs import write_project
from tbhub.supervisor import forked_board, zygote
from tbhub.supervisor.backends.launch import ZygoteLauncher
from tbhub.supervisor.backends.local import INSTANCE_ENV, OWNER_ENV, LocalBackend
from tbhub.supervisor.observe import probe_ready
from tbhub.supervisor.plan import Instance
from tbhub.supervisor.state import board_spec
from tests.scripts import write_script

TENSORBOARD = str(Path(sys.executable).with_name("tensorboard"))
# What boards run by default: the zygote must fork exactly that.
BOARD_PROGRAM = Settings.model_fields["tensorboard_bin"].get_default(call_default_factory=True)


def zygote_backend(tmp_path: Path) -> LocalBackend:
    return LocalBackend(
        state_dir=tmp_path / "boards",
        owner=str(tmp_path),
        tensorboard_bin=BOARD_PROGRAM,
        stop_grace=3,
        zygote_dir=tmp_path / "zygote",
    )


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    backend = zygote_backend(tmp_path)
    try:
        yield backend
    finally:
        for instance in backend.list_instances():
            backend.stop(instance)
        backend.close()


@pytest.fixture
def storage(tmp_path: Path) -> str:
    write_project(tmp_path / "storage" / "vision", runs=2, steps=10, tags=1)
    write_project(tmp_path / "storage" / "audio", runs=1, steps=10, tags=1)
    return str(tmp_path / "storage")


def launcher(backend: LocalBackend) -> ZygoteLauncher:
    assert isinstance(backend.launcher, ZygoteLauncher)
    return backend.launcher


def wait_ready(backend: LocalBackend, instance_id: str, timeout: float = 60) -> Instance:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            for instance in backend.list_instances():
                if instance.instance_id == instance_id and probe_ready(instance, client):
                    return instance
            time.sleep(0.05)
    log = backend._log_path(instance_id)
    raise AssertionError(f"{instance_id} not ready; its log:\n{log.read_text(errors='replace')}")


def runs_of(instance: Instance) -> list[str]:
    url = f"http://{instance.upstream}/boards/{instance.project}/data/runs"
    return sorted(httpx.get(url, timeout=5).json())


def assert_web_assets_served(board: Instance) -> None:
    """The page and a script come out as TensorBoard's bundle holds them (the zygote
    prepared them once for every board)."""
    with zipfile.ZipFile(Path(tensorboard.__file__).with_name("webfiles.zip")) as bundle:
        script = bundle.read("index.js")
    prefix = f"http://{board.upstream}/boards/{board.project}"
    index = httpx.get(f"{prefix}/", timeout=5)
    assert index.status_code == 200
    assert index.text.startswith('<!doctype html><meta name="tb-relative-root" content="./">')
    assert "<tb-webapp>" in index.text
    asset = httpx.get(f"{prefix}/index.js", timeout=5)
    assert asset.headers["content-encoding"] == "gzip"
    assert asset.content == script  # httpx decodes the gzip


def leader(backend: LocalBackend, instance: Instance) -> ProcessRef:
    state = backend._read_state(instance.instance_id)
    assert state is not None
    return state.ref


def test_forked_board_serves_runs_and_looks_like_an_exec_board(
    backend: LocalBackend, storage: str, tmp_path: Path
) -> None:
    started = backend.start(board_spec("vision", storage))
    board = wait_ready(backend, started.instance_id)
    assert runs_of(board) == ["run-00", "run-01"]

    state = backend._read_state(board.instance_id)
    assert state is not None and state.launcher == "zygote"
    zygote_pid = launcher(backend).pid()
    assert zygote_pid is not None
    assert len(os.listdir(f"/proc/{zygote_pid}/task")) == 1, "the zygote runs no thread"
    assert (tmp_path / "zygote").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "zygote" / zygote.SOCKET_NAME).stat().st_mode & 0o777 == 0o600

    process = psutil.Process(state.pid)
    assert os.getsid(state.pid) == state.pid, "the board leads its own session"
    assert process.ppid() != zygote_pid, "the board is not the zygote's child"
    members = state.ref.group_members()
    assert len(members) >= 2, "TensorBoard and its data server"
    for member in members:
        environ = member.environ()
        assert environ[OWNER_ENV] == str(tmp_path)
        assert environ[INSTANCE_ENV] == board.instance_id
        assert forked_board.SLOT_ENV not in environ
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert process.rlimit(psutil.RLIMIT_NOFILE) == (hard, hard), "the launcher raises it"
    assert "TensorBoard" in backend.log_tail(board)
    assert_web_assets_served(board)

    backend.stop(board)
    assert backend.list_instances() == []
    assert not any(m.is_running() and m.status() != psutil.STATUS_ZOMBIE for m in members)


def test_the_zygote_leaves_lazily_made_plugins_to_the_boards_that_use_them(
    backend: LocalBackend, storage: str
) -> None:
    """The PyTorch profiler is made on its tab's first request (lazy_plugins): imported into
    the zygote, its pandas would sit in the memory every board shares a part of."""
    pandas = importlib.util.find_spec("pandas")  # the profiler's, pinned in constraints.txt
    assert pandas is not None and pandas.submodule_search_locations, "pandas is not installed"
    package = os.path.realpath(next(iter(pandas.submodule_search_locations)))
    board = wait_ready(backend, backend.start(board_spec("vision", storage)).instance_id)
    assert runs_of(board) == ["run-00", "run-01"]
    zygote_pid = launcher(backend).pid()
    assert zygote_pid is not None
    mapped = {m.path for m in psutil.Process(zygote_pid).memory_maps()}
    assert not [path for path in mapped if path.startswith(package + os.sep)]


def test_a_board_imports_no_random_generator_to_seed_it(
    backend: LocalBackend, storage: str
) -> None:
    """A forked board seeds numpy's generator afresh only if the zygote imported it: one
    it imports later seeds itself, and importing it just to seed it cost each board ~30 ms
    of its start and its memory."""
    board = wait_ready(backend, backend.start(board_spec("vision", storage)).instance_id)
    assert runs_of(board) == ["run-00", "run-01"]
    zygote_pid = launcher(backend).pid()
    assert zygote_pid is not None
    generators = os.path.join("numpy", "random", "")
    for pid in (zygote_pid, leader(backend, board).pid):
        mapped = {m.path for m in psutil.Process(pid).memory_maps()}
        assert not [path for path in mapped if generators in path], pid


def test_boards_outlive_a_killed_zygote_and_the_next_one_forks_again(
    backend: LocalBackend, storage: str
) -> None:
    first = wait_ready(backend, backend.start(board_spec("vision", storage)).instance_id)
    old_zygote = ProcessRef.of(launcher(backend).pid() or 0)
    stop_group(old_zygote, grace=5, signals=(signal.SIGKILL,))

    assert runs_of(first) == ["run-00", "run-01"], "the board still serves"
    deadline = time.monotonic() + 30
    while launcher(backend).pid() in (None, old_zygote.pid):
        assert time.monotonic() < deadline, "the zygote was not restarted"
        backend.list_instances()  # each supervisor pass restarts a dead zygote
        time.sleep(0.1)
    second = wait_ready(backend, backend.start(board_spec("audio", storage)).instance_id)
    assert runs_of(second) == ["run-00"]
    state = backend._read_state(second.instance_id)
    assert state is not None and state.launcher == "zygote"
    assert runs_of(first) == ["run-00", "run-01"]


def test_a_second_backend_adopts_forked_boards_and_replaces_the_zygote(
    backend: LocalBackend, storage: str, tmp_path: Path
) -> None:
    board = wait_ready(backend, backend.start(board_spec("vision", storage)).instance_id)
    old_zygote = ProcessRef.of(launcher(backend).pid() or 0)
    # As after a crash of tbhub serve: the old backend is never closed.
    successor = zygote_backend(tmp_path)
    try:
        assert successor.reap_unknown() == []
        adopted = successor.list_instances()
        assert [i.instance_id for i in adopted] == [board.instance_id]
        assert not old_zygote.is_alive(), "the old zygote is stopped, not left behind"
        assert launcher(successor).pid() not in (None, old_zygote.pid)
        assert runs_of(adopted[0]) == ["run-00", "run-01"]
    finally:
        successor.close()


def test_exec_takes_over_when_the_zygote_cannot_start(storage: str, tmp_path: Path) -> None:
    (tmp_path / "zygote" / zygote.SOCKET_NAME).mkdir(parents=True)  # the zygote cannot bind
    backend = zygote_backend(tmp_path)
    try:
        board = wait_ready(backend, backend.start(board_spec("vision", storage)).instance_id)
        state = backend._read_state(board.instance_id)
        assert state is not None and state.launcher == "exec"
        assert psutil.Process(state.pid).ppid() == os.getpid()
        assert runs_of(board) == ["run-00", "run-01"]
        backend.stop(board)
    finally:
        backend.close()


def test_zygote_refuses_requests_outside_its_bounds(backend: LocalBackend, tmp_path: Path) -> None:
    backend.list_instances()  # starts the zygote
    good = {
        "argv": [TENSORBOARD, "--version_tb"],
        "log_path": str(tmp_path / "boards" / "x-1.log"),
        "labels": {OWNER_ENV: str(tmp_path), INSTANCE_ENV: "x-1"},
    }
    bad_requests = [
        b"not json",
        json.dumps({**good, "log_path": str(tmp_path / "elsewhere.log")}).encode(),
        json.dumps({**good, "labels": {"PATH": "/tmp"}}).encode(),
        json.dumps({**good, "argv": []}).encode(),
        json.dumps({**good, "extra": 1}).encode(),
    ]
    for request in bad_requests:
        reply = ask_zygote(tmp_path / "zygote", request)
        assert "error" in reply, request
    assert not (tmp_path / "elsewhere.log").exists()
    assert list((tmp_path / "boards").glob("*.log")) == []


def ask_zygote(directory: Path, request: bytes, timeout: float = 30) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        while True:
            with socket.socket(socket.AF_UNIX) as conn:
                try:
                    conn.connect(zygote.socket_address(dir_fd))
                except (FileNotFoundError, ConnectionRefusedError):
                    assert time.monotonic() < deadline, "the zygote never listened"
                    time.sleep(0.05)
                    continue
                conn.sendall(request + b"\n")
                reply: dict[str, object] = json.loads(conn.makefile("rb").readline())
                return reply
    finally:
        os.close(dir_fd)


def test_only_programs_of_this_interpreter_are_forked(tmp_path: Path) -> None:
    here = Path(sys.executable)
    script = write_script(tmp_path / "board", "print('hi')\n")  # #!<this python>
    other = tmp_path / "other"
    other.write_text("#!/usr/bin/env python3\nprint('hi')\n")
    program = forked_board.in_process_program
    assert program([str(here), "-m", "pkg.mod", "--x"]) == forked_board.Program(
        "module", "pkg.mod", ("--x",)
    )
    assert program([str(script), "a"]) == forked_board.Program("script", str(script), ("a",))
    assert program([TENSORBOARD, "--logdir", "x"]) is not None
    assert program([str(here), "-u", "-m", "pkg.mod"]) is None
    assert program([str(other)]) is None
    assert program(["/bin/sleep", "1"]) is None


def test_a_program_for_another_interpreter_is_execd(
    backend: LocalBackend, storage: str, tmp_path: Path
) -> None:
    script = tmp_path / "env-tensorboard"
    script.write_text(
        "#!/bin/sh\necho 'TensorBoard 0.0 at http://127.0.0.1:1/ (Press CTRL+C to quit)'\n"
        "exec sleep 600\n"
    )
    script.chmod(0o755)
    backend.tensorboard_bin = str(script)
    started = backend.start(board_spec("vision", storage))
    state = backend._read_state(started.instance_id)
    assert state is not None and state.launcher == "exec"
    assert psutil.Process(state.pid).ppid() == os.getpid()


def test_a_python_dash_m_program_is_forked_like_a_script(
    backend: LocalBackend, storage: str, tmp_path: Path
) -> None:
    """`<this python> -m module args` runs in the fork as `python -m` would run it."""
    argv = [
        sys.executable, "-m", "tensorboard.main",
        "--logdir", str(Path(storage) / "vision"), "--load_fast=true", "--host", "127.0.0.1",
        "--port", "0",
    ]  # fmt: skip
    log_path = tmp_path / "boards" / "m-1.log"
    launched = launcher(backend).launch(
        argv, log_path=log_path, labels={OWNER_ENV: str(tmp_path), INSTANCE_ENV: "m-1"}
    )
    try:
        assert launched.launcher == "zygote"
        deadline = time.monotonic() + 60
        # The fork opens its log: the file may not be there yet.
        while not (log_path.exists() and "TensorBoard 2" in log_path.read_text()):
            assert time.monotonic() < deadline, "the board never wrote its banner"
            time.sleep(0.05)
        port = log_path.read_text().split("http://127.0.0.1:")[1].split("/")[0]
        url = f"http://127.0.0.1:{port}/data/runs"
        while sorted(httpx.get(url, timeout=5).json()) != ["run-00", "run-01"]:
            assert time.monotonic() < deadline, "the runs were never listed"
            time.sleep(0.05)
        assert psutil.Process(launched.ref.pid).environ()[INSTANCE_ENV] == "m-1"
    finally:
        stop_group(launched.ref, grace=3)


PRECOMPILED = """
import sys
from tbhub.supervisor import forked_board
sys.path.insert(0, sys.argv[1])
forked_board.precompile("launcher_like")
import os
os.remove(os.path.join(sys.argv[1], "launcher_like.py"))  # no source to compile from now
forked_board.run_program(forked_board.Program("module", "launcher_like", ("--flag", "x")))
"""
LAUNCHER_LIKE = """
import dataclasses, sys

@dataclasses.dataclass(frozen=True)  # looks itself up in sys.modules, as the launcher's do
class Args:
    argv: tuple[str, ...]

if __name__ == "__main__":
    named = sys.argv[0].endswith("launcher_like.py")
    print(__name__, __spec__.name, named, Args(tuple(sys.argv[1:])))
"""


def test_a_forked_board_runs_the_launcher_the_zygote_compiled_as_main(tmp_path: Path) -> None:
    """The zygote compiles the launcher once (forked_board.precompile); each board runs that
    code as `python -m` would run the module, compiling nothing again (here its source is
    gone before it runs)."""
    (tmp_path / "launcher_like.py").write_text(LAUNCHER_LIKE)
    done = subprocess.run([sys.executable, "-c", PRECOMPILED, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == ("__main__ launcher_like True Args(argv=('--flag', 'x'))")
