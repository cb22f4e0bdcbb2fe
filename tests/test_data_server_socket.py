"""supervisor/data_server/no_delay.py: a board's data server sends its gRPC answers at once.

A real `tensorboard-data-server`, started by TensorBoard's own ingester over a real logdir in
a fresh interpreter, with and without the module installed. Afterwards the test takes a copy
of the server's listening socket (as the module does, through pidfd_getfd) and reads its
TCP_NODELAY, which every connection it accepts inherits; and times GetExperiment on fresh
connections, which without it waits out Linux's 40 ms delayed ACK one time in two or three."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from pytest import MonkeyPatch

from tbhub.storage.sample_logs import write_project

SLOW_S = 0.035  # two RPCs on a fresh connection: 1-10 ms, or 43-47 ms with Nagle's delay
START = """
import os, sys, time
from tensorboard.data import server_ingester
from tensorboard.data.proto import data_provider_pb2
from tensorboard.util import grpc_util
from tbhub.supervisor.data_server import no_delay
if sys.argv[2] == "installed":
    assert no_delay.install()
ingester = server_ingester.SubprocessServerDataIngester(
    server_binary=server_ingester.get_server_binary(), logdir=sys.argv[1], reload_interval=30,
    channel_creds_type=grpc_util.ChannelCredsType.LOCAL, samples_per_plugin={})
ingester.start()
address = ingester.data_provider._addr
slow = 0
for _ in range(int(sys.argv[3])):  # a new connection each time: the first RPC's delay
    stub = server_ingester._make_stub(address, grpc_util.ChannelCredsType.LOCAL)
    started = time.perf_counter()
    stub.GetExperiment(data_provider_pb2.GetExperimentRequest(), timeout=5)
    stub.GetExperiment(data_provider_pb2.GetExperimentRequest(), timeout=5)
    slow += time.perf_counter() - started > float(sys.argv[4])
print(address.rsplit(":", 1)[1], slow, flush=True)
sys.stdin.read()  # the data server lives while the test looks at it
"""


def listener_no_delay(port: int, pid: int) -> bool:
    """TCP_NODELAY of the socket a child of `pid` listens on at `port`."""
    from tbhub.supervisor.data_server.no_delay import _sockets_of

    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for child in children:
        for copy in _sockets_of(int(child)):
            with copy:
                if copy.family == socket.AF_INET and copy.getsockname()[1] == port:
                    return bool(copy.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
    raise AssertionError(f"no child of {pid} listens on port {port}")


def start(logdir: Path, mode: str, connections: int) -> tuple[bool, int]:
    """Whether the data server's listener has TCP_NODELAY, and on how many of `connections`
    fresh connections two RPCs took over SLOW_S."""
    argv = [sys.executable, "-c", START, str(logdir), mode, str(connections), str(SLOW_S)]
    with subprocess.Popen(argv,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                          env=os.environ) as board:  # fmt: skip
        assert board.stdout is not None and board.stdin is not None
        port, slow = board.stdout.readline().split()
        try:
            return listener_no_delay(int(port), board.pid), int(slow)
        finally:
            board.stdin.close()
            board.wait(timeout=30)


def test_the_data_server_answers_without_nagles_delay(tmp_path: Path) -> None:
    logdir = tmp_path / "logs"
    write_project(logdir, runs=2, steps=10, tags=1)
    no_delay, _ = start(logdir, "as-shipped", 1)
    assert not no_delay  # TensorBoard's data server as it comes: Nagle's algorithm on
    no_delay, slow = start(logdir, "installed", 12)
    assert no_delay
    # As shipped, 4-8 connections of 12 wait 40 ms; installed, none on a quiet host (a loaded
    # one may hold a process that long now and then).
    assert slow <= 2, slow


def test_install_is_idempotent(monkeypatch: MonkeyPatch) -> None:
    from tensorboard.data import server_ingester

    from tbhub.supervisor.data_server import no_delay

    monkeypatch.setattr(server_ingester, "_make_stub", server_ingester._make_stub)
    assert no_delay.install()
    wrapped = server_ingester._make_stub
    assert no_delay.install()
    assert server_ingester._make_stub is wrapped


def test_a_stub_to_a_server_that_is_not_a_child_is_made_as_before(monkeypatch: MonkeyPatch) -> None:
    from tensorboard.data import server_ingester
    from tensorboard.util import grpc_util

    from tbhub.supervisor.data_server import no_delay

    monkeypatch.setattr(server_ingester, "_make_stub", server_ingester._make_stub)
    assert no_delay.install()
    with socket.socket() as other:  # --grpc_data_provider: a server of someone else's
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        stub = server_ingester._make_stub(f"localhost:{port}", grpc_util.ChannelCredsType.LOCAL)
        assert stub is not None
        assert not other.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
