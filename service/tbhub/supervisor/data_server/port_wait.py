"""TensorBoard's wait for its data server's port, ended the moment the port is written.

TensorBoard (`server_ingester.SubprocessServerDataIngester.start`) starts
`tensorboard-data-server`, sleeps 10 ms, reads the port file the server writes once it
listens, and if it is not there yet sleeps half a second before reading again (up to 20
times). On a busy host the server often needs more than those 10 ms, and the board then
serves up to half a second later than it could: one start in eight at a load of 8, most of
them at a load of 14, and for a board over a few runs that half second is most of its start.

`install()` gives that loop a `time` whose `sleep` reads the file the loop last read every
few milliseconds and returns as soon as the port is in it (a line ending in a newline, as
TensorBoard checks), or when the time asked for is over: the loop's attempts, its checks
of the server's exit and its 10 s limit stay TensorBoard's. If TensorBoard's module no longer
has these names, nothing is changed and boards start as TensorBoard starts them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import ClassVar

from tbhub.supervisor.data_server.ingester import StandIn, ingester

POLL_S = 0.005  # between reads of the port file while the loop would sleep


class PortWait(StandIn):
    """Stands in for `time` in TensorBoard's data-server module: only `sleep` differs."""

    module: ClassVar[ModuleType] = time

    def __init__(self, read: Callable[[str], str | None]) -> None:
        self._read = read
        self._path: str | None = None

    def read(self, path: str) -> str | None:
        """TensorBoard's own read of a file, noting which file the loop waits on."""
        self._path = path
        return self._read(path)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._written():
                return
            time.sleep(min(POLL_S, left))

    def _written(self) -> bool:
        if self._path is None:
            return False
        try:
            return (self._read(self._path) or "").endswith("\n")
        except OSError:
            return False


def install() -> bool:
    """Make this process's TensorBoard stop waiting on its data server once it listens.
    True if installed (or already), False if TensorBoard's module has changed shape."""
    module = ingester()
    current = getattr(module, "time", None)
    if isinstance(current, PortWait):
        return True
    read = getattr(module, "_maybe_read_file", None)
    if current is not time or not callable(read):
        return False
    wait = PortWait(read)
    module.time = wait
    module._maybe_read_file = wait.read
    return True
