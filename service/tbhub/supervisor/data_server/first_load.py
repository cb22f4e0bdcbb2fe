"""When a board has finished its first load of its logdir, and its answers marked so.

nginx keeps a board's answers for a second (TBHUB_BOARD_ANSWER_CACHE_SECONDS), but not
while the board is still loading its logdir for the first time: a board of thousands of
runs lists more of them with every answer then, and a kept listing would show each reader
one up to 2 s old (bench/view_board.py). After its first load, a board's data changes only
as its files grow, once per reload interval, and a second more is nothing to its readers.

TensorBoard (`--load_fast=true`) reads the logdir through its data server
(`tensorboard_data_server`, started by `server_ingester.SubprocessServerDataIngester.start`
with `subprocess.Popen`), which with `--verbose` logs "Finished load cycle" after each pass
over the logdir. `install()` gives that module a `subprocess` whose `Popen` adds
`--verbose` and a pipe for the server's stderr; one thread reads it, passes every line on
to the board's own stderr (less the info lines `--verbose` added) and sets `loaded` on the
first "Finished load cycle". The thread starts with the data server, in the board itself:
the zygote runs no thread.

`MarkLoaded` wraps the board's WSGI app: an answer to a request that arrived after the
first load says `LOADED_HEADER: 1`, and nginx keeps only answers that say so (and hides the
header). Fails closed: a data server that never says it finished, one whose words change,
or a TensorBoard whose module has another shape leaves every answer unmarked, so nothing
is kept and each request goes to the board, as with the cache off.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import IO, Any, ClassVar

from tbhub.supervisor.data_server.ingester import StandIn, ingester

LOADED_HEADER = "X-Tbhub-Board-Loaded"
FINISHED = b"Finished load cycle"
VERBOSE = "--verbose"
# env_logger's line: "[2026-12-05T07:17:52Z INFO  rustboard_core::cli] Starting load cycle".
INFO_LINE = re.compile(rb"^\[\S+ INFO ")
MAX_LINE = 64 * 1024  # bytes of one log line read at a time


class FirstLoad:
    """Set once the board's data server has finished its first pass over the logdir."""

    def __init__(self) -> None:
        self.loaded = threading.Event()

    def relay(self, pipe: IO[bytes], *, quiet_info: bool, to_fd: int = 2) -> None:
        """Pass the data server's log on to `to_fd` line by line until it closes, noting its
        first finished load. Never stops early: a pipe nobody reads would block the server."""
        for line in iter(lambda: pipe.readline(MAX_LINE), b""):
            if FINISHED in line:
                self.loaded.set()
            if quiet_info and INFO_LINE.match(line):
                continue
            _write_all(to_fd, line)
        pipe.close()

    def popen(self, args: Iterable[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        """`subprocess.Popen` for the data server: verbose, its stderr read by `relay`."""
        if kwargs.get("stderr") is not None:  # not the call this module knows: left alone
            return subprocess.Popen(list(args), **kwargs)
        argv = list(args)
        quiet_info = VERBOSE not in argv  # TensorBoard's logger at INFO adds it itself
        if quiet_info:
            argv.append(VERBOSE)
        process = subprocess.Popen(argv, stderr=subprocess.PIPE, **kwargs)
        assert process.stderr is not None
        reader = threading.Thread(
            target=self.relay, args=(process.stderr,), kwargs={"quiet_info": quiet_info},
            name="tbhub-data-server-log", daemon=True,
        )  # fmt: skip
        reader.start()
        return process


def _write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            data = data[os.write(fd, data) :]
        except OSError:  # the board's log is gone: keep reading, drop the line
            return


class _Subprocess(StandIn):
    """Stands in for `subprocess` in TensorBoard's data-server module: only `Popen` differs."""

    module: ClassVar[ModuleType] = subprocess

    def __init__(self, first_load: FirstLoad) -> None:
        self.first_load = first_load
        self.Popen: Callable[..., subprocess.Popen[bytes]] = first_load.popen


def install() -> FirstLoad | None:
    """Make this process's TensorBoard start its data server through a `FirstLoad`; None if
    TensorBoard's module has changed shape (then no answer is ever marked)."""
    module = ingester()
    current = getattr(module, "subprocess", None)
    if isinstance(current, _Subprocess):
        return current.first_load
    if current is not subprocess:
        return None
    first_load = FirstLoad()
    module.subprocess = _Subprocess(first_load)
    return first_load


class MarkLoaded:
    """A WSGI app whose answers say `LOADED_HEADER: 1` when their request arrived after the
    first load: what such an answer holds was read from a logdir loaded whole at least once.
    Checked on arrival, not on answering: an answer begun during the load may be partial."""

    def __init__(self, app: Any, first_load: FirstLoad) -> None:
        self.app, self.first_load = app, first_load

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if not self.first_load.loaded.is_set():
            return self.app(environ, start_response)

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, (LOADED_HEADER, "1")], exc_info)

        return self.app(environ, start)
