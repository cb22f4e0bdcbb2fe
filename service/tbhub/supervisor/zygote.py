"""The board zygote: one process per data dir that has imported TensorBoard and forks boards.

Run as `python -P -m tbhub.supervisor.zygote --dir <data_dir>/zygote --state-dir <boards>`
by `backends.launch.ZygoteLauncher`. It imports TensorBoard, its plugins (not those a board
makes on their first request, `lazy_plugins.LAZY_PLUGINS`) and the data server binary's
location, starts no thread, freezes its objects for the collector (so refcount and GC
writes in children do not unshare them), then answers on `<dir>/zygote.sock` (mode 0600):
one JSON line per connection,

    {"argv": [...], "log_path": "<state dir>/<id>.log", "labels": {"TBHUB_OWNER": ..., ...}}
    -> {"pid": 1234, "create_time": 1760000000.12} or {"error": "..."}

Each board is forked twice (the middle process exits at once, so the board is reparented
to init and the zygote reaps only the middle process), starts a new session, points stdio
at its log, takes its labels, and runs the argv the exec launcher would run, in process:
`python -m <module> ...` or a script such as `tensorboard` whose `#!` names this same
interpreter, through runpy as the interpreter itself does after an exec. The zygote exits
when its stdin (a pipe from `tbhub serve`) closes.
Only stdlib and psutil are imported here besides TensorBoard: nothing that starts threads.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import importlib
import inspect
import json
import mimetypes
import os
import re
import select
import socket
import struct
import sys
import threading
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from tbhub.supervisor.board_process import (
    installed_entry_points,
    launcher_command,
    release_free_heap,
)
from tbhub.supervisor.forked_board import become_board, in_process_program, precompile
from tbhub.supervisor.lazy_plugins import LAZY_PLUGINS

SOCKET_NAME = "zygote.sock"
# Thread pools that native libraries start on import unless told not to (numpy's OpenBLAS).
SINGLE_THREADED_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MAX_REQUEST_BYTES = 64 * 1024
REQUEST_TIMEOUT = 5.0
LOG_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,127}\.log")
LABEL_NAME = re.compile(r"TBHUB_[A-Z_]{1,40}")
# What a board imports besides the plugins (found by listing sys.modules in a fresh board).
BOARD_MODULES = (
    "tensorboard.main",
    "tensorboard.program",
    "tensorboard.manager",
    "tensorboard.backend.application",
    "tensorboard.backend.event_processing.data_ingester",
    "tensorboard.data.grpc_provider",
    "absl.flags.argparse_flags",
    "grpc._channel",
    "encodings.idna",
    "shlex",
    "getopt",
    "waitress",  # the board's HTTP server (board_process.board_server)
    "waitress.server",
)
# Which of SINGLE_THREADED_ENV the zygote set itself (boards remove them again).
_ADDED_ENV: list[str] = []


class RequestError(ValueError):
    """A request the zygote refuses; the message goes back to the client."""


def socket_address(dir_fd: int) -> str:
    """The socket's path through an open directory fd: AF_UNIX paths are limited to 107
    bytes, a data dir path is not."""
    return f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"


# -- in the zygote ----------------------------------------------------------------------------


def warm_up() -> str:
    """Import what every board imports and do the work every board repeats. Returns the
    TensorBoard version."""
    from tensorboard import default, version
    from tensorboard.compat import tf
    from tensorboard.data import server_ingester

    for module in BOARD_MODULES:  # `tensorboard` itself loads several of these lazily
        importlib.import_module(module)
    default.get_static_plugins()
    for entry_point in installed_entry_points():  # boards forked from here read them no more
        if entry_point.name in LAZY_PLUGINS:
            # Boards import these on their first request, and few ever do: imported here,
            # every board would pay its share of them (the PyTorch profiler's pandas: 28 MiB).
            continue
        try:
            entry_point.load()
        except Exception as exc:  # each board that loads it reports it (board_plugins)
            print(f"zygote: board plugin {entry_point.name} does not import: {exc}",
                  file=sys.stderr, flush=True)  # fmt: skip
    getattr(tf, "__version__", None)  # resolves the lazy TensorFlow stub once
    server_ingester.get_server_binary()
    mimetypes.init()  # the system's type map, which TensorBoard's first answer reads (0.3 MiB)
    precompile(launcher_command()[-1])  # the module every board runs as __main__
    _share_web_assets()
    return str(version.VERSION)


def _share_web_assets() -> None:
    """Every board unzips and gzips TensorBoard's ~15 MB of web assets as it starts: ~0.3 s
    of CPU while its data server loads, and ~8 MB of private memory. Do it once here, with
    TensorBoard's own code, and give each board those routes bound to its own core plugin.
    Only boards on the default asset bundle get them; the pages stay shared."""
    from tensorboard import assets
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.core import core_plugin

    bundle = assets.get_default_assets_zip_provider()
    if bundle is None:
        return
    own_routes = core_plugin.CorePlugin.get_resource_apps
    prototype = core_plugin.CorePlugin(base_plugin.TBContext(assets_zip_provider=bundle))
    routes = own_routes(prototype)
    if not all(_is_bound_route(app) for app in routes.values()):
        return  # another TensorBoard: boards do the work themselves

    def shared_routes(plugin: Any) -> dict[str, Any]:
        if plugin._assets_zip_provider is not bundle:
            return dict(own_routes(plugin))
        return {route: _bind(app, plugin) for route, app in routes.items()}

    core_plugin.CorePlugin.get_resource_apps = shared_routes
    assets.get_default_assets_zip_provider = lambda: bundle


def _is_bound_route(app: object) -> bool:
    return isinstance(app, functools.partial) and inspect.ismethod(app.func)


def _bind(app: functools.partial[Any], plugin: Any) -> functools.partial[Any]:
    """The same route (a method with its arguments) for another plugin instance."""
    method = app.func
    assert isinstance(method, types.MethodType)
    return functools.partial(types.MethodType(method.__func__, plugin), *app.args, **app.keywords)


def serve(directory: Path, state_dir: Path) -> None:
    started = time.monotonic()
    version = warm_up()
    gc.collect()
    gc.freeze()  # imported objects stay shared: the collector never writes to them again
    # Boards would otherwise allocate into the free pages, each copying pages it never
    # shares, and the zygote would keep the stale copies.
    release_free_heap()
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address = socket_address(dir_fd)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(address)
    old_umask = os.umask(0o177)
    try:
        listener.bind(address)
    finally:
        os.umask(old_umask)
    listener.listen(64)
    print(
        f"zygote {os.getpid()}: TensorBoard {version} imported in "
        f"{time.monotonic() - started:.2f}s; listening",
        file=sys.stderr,
        flush=True,
    )
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
            print(f"zygote {os.getpid()}: tbhub serve went away; exiting", file=sys.stderr)
            return
        if listener in readable:
            conn, _ = listener.accept()
            with conn:
                answer(conn, listener, state_dir)


def answer(conn: socket.socket, listener: socket.socket, state_dir: Path) -> None:
    try:
        _check_peer(conn)
        conn.settimeout(REQUEST_TIMEOUT)
        request = parse_request(_read_line(conn), state_dir)
        reply: dict[str, Any] = spawn_board(request, close=(conn, listener))
    except (RequestError, OSError) as exc:
        reply = {"error": str(exc)}
        print(f"zygote: refused a request: {exc}", file=sys.stderr, flush=True)
    with contextlib.suppress(OSError):  # the client gave up
        conn.sendall(json.dumps(reply).encode() + b"\n")


def _check_peer(conn: socket.socket) -> None:
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    if uid != os.getuid():
        raise RequestError(f"uid {uid} may not start boards")


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise RequestError(f"request longer than {MAX_REQUEST_BYTES} bytes")
    return data.split(b"\n", 1)[0]


def parse_request(line: bytes, state_dir: Path) -> dict[str, Any]:
    """Validate a request: argv strings, a log file in the state dir, TBHUB_* labels."""
    try:
        request = json.loads(line)
    except ValueError:
        raise RequestError("request is not one line of JSON") from None
    if not isinstance(request, dict) or set(request) != {"argv", "log_path", "labels"}:
        raise RequestError("request needs exactly argv, log_path and labels")
    argv, log_path, labels = request["argv"], request["log_path"], request["labels"]
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        raise RequestError("argv must be a non-empty list of strings")
    if any("\0" in a for a in argv):
        raise RequestError("argv may not contain NUL")
    request["program"] = in_process_program(argv)
    if request["program"] is None:
        raise RequestError(f"{argv[0]} does not run on this interpreter; exec it instead")
    if not isinstance(log_path, str) or Path(log_path).parent != state_dir:
        raise RequestError(f"log_path must be a file directly in {state_dir}")
    if not LOG_NAME.fullmatch(Path(log_path).name):
        raise RequestError("log_path must be named <instance id>.log")
    if not isinstance(labels, dict) or not labels:
        raise RequestError("labels must be a non-empty object")
    for name, value in labels.items():
        if not LABEL_NAME.fullmatch(name) or not isinstance(value, str) or "\0" in value:
            raise RequestError(f"bad label {name!r}")
    return request


def spawn_board(request: dict[str, Any], *, close: Sequence[socket.socket]) -> dict[str, Any]:
    """Fork twice; return the board's PID and start time as the middle process saw them."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1 or threading.active_count() != 1:
        raise RequestError(f"the zygote runs {threads} threads; forking now is unsafe")
    sys.stdout.flush()
    sys.stderr.flush()
    report_r, report_w = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(report_r)
            board = os.fork()
            if board == 0:
                os.close(report_w)
                become_board(request, close=close, drop_env=_ADDED_ENV)
            created = psutil.Process(board).create_time()  # before we exit: it cannot be reaped
            os.write(report_w, json.dumps({"pid": board, "create_time": created}).encode())
        finally:
            os._exit(0)
    os.close(report_w)
    with os.fdopen(report_r, "rb") as report:
        data = report.read()
    os.waitpid(middle, 0)
    if not data:
        raise RequestError("the board process could not be forked")
    result: dict[str, Any] = json.loads(data)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbhub.supervisor.zygote")
    parser.add_argument("--dir", type=Path, required=True, help="where the socket lives")
    parser.add_argument("--state-dir", type=Path, required=True, help="board state and logs")
    args = parser.parse_args(argv)
    # Before anything imports numpy; boards drop what was added here (relabel_environ).
    _ADDED_ENV[:] = [name for name in SINGLE_THREADED_ENV if name not in os.environ]
    os.environ.update({name: SINGLE_THREADED_ENV[name] for name in _ADDED_ENV})
    serve(args.dir.absolute(), args.state_dir.absolute())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
