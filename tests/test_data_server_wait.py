"""supervisor/data_server/port_wait.py: TensorBoard's start waits on its data server only
until the server has written its port, not to the next half second.

A real `tensorboard-data-server`, started by TensorBoard's own ingester over a real logdir,
made to take 0.1 s before it starts (a wrapper named by TENSORBOARD_DATA_SERVER_BINARY,
TensorBoard's own way to choose the binary): more than the 10 ms TensorBoard waits before its
first look at the port file. Each start runs in a fresh interpreter, with and without the
module installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pytest import MonkeyPatch

from tbhub.storage.sample_logs import write_project

DELAY_S = 0.1
START = """
import sys, time
from tensorboard.data import server_ingester
from tensorboard.util import grpc_util
from tbhub.supervisor.data_server import port_wait
if sys.argv[2] == "installed":
    assert port_wait.install()
started = time.perf_counter()
ingester = server_ingester.SubprocessServerDataIngester(
    server_binary=server_ingester.get_server_binary(), logdir=sys.argv[1], reload_interval=30,
    channel_creds_type=grpc_util.ChannelCredsType.LOCAL, samples_per_plugin={})
ingester.start()
print(time.perf_counter() - started)
"""


def start_seconds(logdir: Path, wrapper: Path, mode: str) -> float:
    env = {**os.environ, "TENSORBOARD_DATA_SERVER_BINARY": str(wrapper)}
    done = subprocess.run([sys.executable, "-c", START, str(logdir), mode], env=env,
                          capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def slow_server(tmp_path: Path) -> Path:
    from tensorboard.data import server_ingester

    real = server_ingester.get_server_binary().path
    wrapper = tmp_path / "slow-data-server"
    wrapper.write_text(f'#!/bin/sh\nsleep {DELAY_S}\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_the_board_stops_waiting_once_the_data_server_listens(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    write_project(logdir, runs=2, steps=10, tags=1)
    wrapper = slow_server(tmp_path)
    # TensorBoard alone: its first look after 10 ms misses, the next comes 0.5 s later.
    assert start_seconds(logdir, wrapper, "as-shipped") >= 0.5
    installed = [start_seconds(logdir, wrapper, "installed") for _ in range(3)]
    assert min(installed) < 0.4, installed


def test_install_is_idempotent_and_keeps_the_rest_of_time(monkeypatch: MonkeyPatch) -> None:
    from tensorboard.data import server_ingester

    from tbhub.supervisor.data_server import port_wait

    # Put back as they were when the test ends: other tests of this process see TensorBoard's.
    monkeypatch.setattr(server_ingester, "time", server_ingester.time)
    monkeypatch.setattr(server_ingester, "_maybe_read_file", server_ingester._maybe_read_file)
    assert port_wait.install()
    assert port_wait.install()
    assert isinstance(server_ingester.time, port_wait.PortWait)
    assert server_ingester.time.monotonic() > 0  # everything but sleep is time's own
