"""The PyTorch profiler is made on its tab's first request, not when a board starts: a real
board started as the exec launcher starts it (`python -m tbhub.supervisor.board_process`),
with the profiler turned on, on a real `torch.profiler` trace. Until that request the board
has not imported the plugin's package nor started the second Python its constructor spawns
(a multiprocessing Manager); then the plugin reads the trace as it does when made at once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tbhub.supervisor.board_process import DISABLE_FLAG, launcher_command
from tbhub.supervisor.lazy_plugins import LAZY_PLUGINS, has_data_file
from tests.e2e.harness import wait_until
from tests.e2e.plugin_packages import write_profiler_trace
from tests.ports import free_port

PROFILER = LAZY_PLUGINS["torch_profiler"]


def test_the_lazy_profiler_declares_what_the_pinned_plugin_serves() -> None:
    from torch_tb_profiler.plugin import TorchProfilerPlugin

    bare = object.__new__(TorchProfilerPlugin)  # its routes, without the process it spawns
    assert tuple(bare.get_plugin_apps()) == PROFILER.routes
    assert TorchProfilerPlugin.plugin_name == PROFILER.plugin_name
    metadata = bare.frontend_metadata()
    assert (metadata.es_module_path, metadata.disable_reload) == (
        PROFILER.es_module_path, PROFILER.disable_reload)  # fmt: skip


def test_the_data_check_finds_a_trace_and_gives_up_past_its_limit(tmp_path: Path) -> None:
    import re

    pattern = re.compile(PROFILER.data_file)
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "events.out.tfevents.1").write_bytes(b"")
    assert not has_data_file(str(tmp_path), pattern)
    (tmp_path / "a" / "b" / "host_1.17.pt.trace.json.gz").write_bytes(b"")
    assert has_data_file(str(tmp_path), pattern)
    (tmp_path / "a" / "b" / "host_1.17.pt.trace.json.gz").unlink()
    assert has_data_file(str(tmp_path), pattern, limit=1)  # too big to tell: offered


class Board:
    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process, self.url = process, f"http://127.0.0.1:{port}"

    def descendants(self) -> list[str]:
        """The command lines of the board's live descendants (its data server, any Manager);
        one that exits while listed (a zombie until reaped) is left out."""
        lines = []
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                lines.append(" ".join(child.cmdline()))
            except psutil.NoSuchProcess:  # ZombieProcess too
                continue
        return lines


@pytest.fixture
def board(tmp_path: Path) -> Iterator[Board]:
    logdir = tmp_path / "vision"
    write_profiler_trace(logdir / "train")
    port = free_port()
    command = [*launcher_command(), f"{DISABLE_FLAG}=projector", "--logdir", str(logdir),
               "--load_fast=true", "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with (tmp_path / "board.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)  # fmt: skip
    try:
        yield Board(process, port)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def listing(board: Board) -> dict[str, object] | None:
    try:
        response = httpx.get(f"{board.url}/data/plugins_listing", timeout=5)
    except httpx.TransportError:
        return None
    return response.json() if response.status_code == 200 else None  # type: ignore[no-any-return]


def profiler_runs(board: Board) -> list[str]:
    response = httpx.get(f"{board.url}/data/plugin/pytorch_profiler/runs", timeout=30)
    return response.json()["runs"] if response.status_code == 200 else []  # type: ignore[no-any-return]


def test_the_profiler_is_offered_at_start_and_made_on_its_first_request(board: Board) -> None:
    plugins = wait_until(lambda: listing(board), timeout=90, what="the board's plugins")
    assert isinstance(plugins, dict)
    entry = plugins["pytorch_profiler"]
    assert isinstance(entry, dict) and entry["enabled"] is True  # the trace is its data
    assert not any("multiprocessing" in line for line in board.descendants())

    wait_until(lambda: profiler_runs(board) == ["train"], timeout=90,
               what="the profiler to read the trace")  # fmt: skip
    assert any("multiprocessing" in line for line in board.descendants())
