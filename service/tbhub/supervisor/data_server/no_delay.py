"""TensorBoard's data server made to send its answers at once: TCP_NODELAY on its listener.

`tensorboard-data-server` serves gRPC through tonic's `serve_with_incoming`, which never sets
TCP_NODELAY on the connections it accepts (tensorboard/data/server/cli.rs). An answer is
written in several pieces; with Nagle's algorithm on, the next piece waits for the client's
ACK of the last, and Linux delays that ACK by 40 ms. Measured here: one RPC in two or three
to a fresh data server took 43-47 ms instead of 1-5 ms, the first one too (TensorBoard's
GetExperiment at start, which every board waits on), so a 50-run board's start paid 40 ms in
five starts of eight.

`install()` makes TensorBoard set the option on the server's listening socket as soon as it
knows the port, before it connects: the connections accepted from then on inherit it (Linux
copies it from the listener). TensorBoard's process is the server's parent, so it may take a
copy of that socket's descriptor (`pidfd_getfd`, Linux 5.6+; the same access a parent has to
trace its child). Where that cannot be done (an older kernel, a seccomp profile that forbids
it), the board starts and serves as TensorBoard would, only with the delays.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

from tbhub.supervisor.data_server.ingester import ingester

# pidfd_getfd(2): the same number on every architecture (new system calls are numbered alike).
_PIDFD_GETFD = 438


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _children() -> list[int]:
    """This process's children (/proc/self/task/*/children: each thread's own)."""
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/children") as listed:
            pids += [int(pid) for pid in listed.read().split()]
    return pids


def _sockets_of(pid: int) -> Iterator[socket.socket]:
    """Copies of the socket descriptors of process `pid` (closed by the caller)."""
    pidfd = os.pidfd_open(pid)
    try:
        for name in os.listdir(f"/proc/{pid}/fd"):
            try:
                if not os.readlink(f"/proc/{pid}/fd/{name}").startswith("socket:"):
                    continue
            except OSError:  # closed meanwhile
                continue
            fd = int(_libc().syscall(ctypes.c_long(_PIDFD_GETFD), ctypes.c_int(pidfd),
                                     ctypes.c_int(int(name)), ctypes.c_uint(0)))  # fmt: skip
            if fd < 0:
                code = ctypes.get_errno()
                raise OSError(code, f"pidfd_getfd: {os.strerror(code)}")
            yield socket.socket(fileno=fd)
    finally:
        os.close(pidfd)


def no_delay_listener(port: int) -> bool:
    """Set TCP_NODELAY on the socket a child of this process listens on at `port`. True if
    found and set; OSError when the kernel refuses to share a child's descriptors."""
    for pid in _children():
        try:
            copies = list(_sockets_of(pid))
        except (FileNotFoundError, ProcessLookupError):  # that child has exited
            continue
        found = False
        for copy in copies:
            with copy:
                if found or copy.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                if copy.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) and (
                    copy.getsockname()[1] == port
                ):
                    copy.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    found = True
        if found:
            return True
    return False


def _port_of(address: str) -> int | None:
    host, _, port = address.rpartition(":")
    return int(port) if host and port.isdigit() else None


def install() -> bool:
    """Make this process's TensorBoard set TCP_NODELAY on its data server's listener before it
    connects. True if installed (or already), False if TensorBoard's module has changed shape."""
    module = ingester()
    make_stub = getattr(module, "_make_stub", None)
    if not callable(make_stub):
        return False
    if getattr(make_stub, "_tbhub_no_delay", False):
        return True

    def no_delay_then(make: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(make)
        def stub(address: str, *args: Any, **kwargs: Any) -> Any:
            port = _port_of(address)
            if port is not None:
                # Not allowed here (OSError): the board serves, with Nagle's delays.
                with contextlib.suppress(OSError):
                    no_delay_listener(port)
            return make(address, *args, **kwargs)

        stub._tbhub_no_delay = True  # type: ignore[attr-defined]
        return stub

    module._make_stub = no_delay_then(make_stub)
    return True
