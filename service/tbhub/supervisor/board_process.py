"""What runs inside a board process: the spec turned into TensorBoard's flags, and the launcher.

`board_args(spec)` is the one place a spec becomes TensorBoard arguments. Every way of
starting a board uses it: `python -m tbhub.supervisor.board_process <args>` (the local
backend's exec) and any in-process start (a forked child calls `run_board(args)`).

The launcher adds what plain `tensorboard` cannot do from flags:
- plugins that are off by default stay unloaded unless the project opted in: the projector
  reads `model_checkpoint_path` outside the logdir (TensorBoard #7119, still open), so a
  board that loads it first gives up, through Landlock, reading any file outside its logdir
  and what Python and TensorBoard need (`confine_reads`); where the kernel cannot do that
  the projector stays off and the board's log says why;
- the soft RLIMIT_NOFILE is raised to the hard one: RustBoard keeps one descriptor per live
  event file (TensorBoard #4955).
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tbhub.supervisor import data_server
from tbhub.supervisor.board_assets import BoardAssets, installed_assets
from tbhub.supervisor.lazy_plugins import LAZY_PLUGINS, lazy_loader

# The board image holds this module and those above (the data_server package whole), alone
# of tbhub.
if TYPE_CHECKING:
    from tbhub.supervisor.model import BoardSpec

# Plugins a board loads only when its project opts in, and why each is off.
OFF_BY_DEFAULT_PLUGINS = {
    "projector": "reads checkpoint files outside the logdir (TensorBoard #7119)",
    "pytorch_profiler": "the PyTorch profiler (*.pt.trace.json traces): loaded on its tab's "
    "first request, it then imports pandas and starts a second Python process",
}
# Plugins whose entry point has another name than the plugin: left out by either name,
# before their package is imported.
ENTRY_POINT_PLUGINS = {"torch_profiler": "pytorch_profiler"}
DISABLE_FLAG = "--tbhub_disable_plugins"
# The operator's extra plugins (`tbhub admin plugins install`) live in their own directory,
# appended to sys.path; a board loads those its project turned on (ENABLE_FLAG) alone.
PLUGIN_PATH_FLAG = "--tbhub_plugin_path"
ENABLE_FLAG = "--tbhub_enable_plugins"
ENTRY_POINT_GROUP = "tensorboard_plugins"
# A plugin that fails to import or load is left out; the board says so on one line of its
# log that starts with this marker and ends in JSON {"plugin", "error"} (plugin_errors()).
PLUGIN_ERROR_MARKER = "tbhub-plugin-error: "
PLUGIN_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"  # an entry point's name, as projects give it
MAX_PLUGIN_ERROR = 500  # characters of one error kept
CONFINED_PLUGINS = {"projector"}  # loaded only into a board that cannot read outside its logdir
CONTAINED_ENV = "TBHUB_BOARD_CONTAINED"  # "mounts": a container that sees its project alone

# Landlock (Linux 5.13+, unprivileged): the syscalls, the same number on every architecture,
# and the two rights a board gives up outside the paths it keeps.
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_READ_FILE, _READ_DIR = 1 << 2, 1 << 3
_PR_SET_NO_NEW_PRIVS = 38
# What Python, its libraries and TensorBoard read while a board serves, besides the logdir
# and Python's own directories: no other process's /proc, no temporary directory (where
# other projects may live), nothing else of /etc (no /etc/passwd).
SYSTEM_READ_PATHS = (
    "/usr", "/lib", "/lib64", "/lib32",
    "/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/sys/devices/system/cpu",
    "/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/shm",
    "/etc/ld.so.cache", "/etc/localtime", "/etc/mime.types", "/etc/hosts", "/etc/resolv.conf",
    "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/ssl", "/etc/ca-certificates",
)  # fmt: skip


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _syscall(number: int, *args: object) -> int:
    result = int(_libc().syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"Landlock: {os.strerror(code)}")
    return result


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none (too old, or not enabled)."""
    try:
        return _syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(
            _CREATE_RULESET_VERSION))  # fmt: skip
    except OSError:
        return 0


def read_roots(logdir: str) -> list[str]:
    """What a confined board may still read: its logdir, Python's directories and module
    paths, and `SYSTEM_READ_PATHS`. /proc/self is this process's own (Landlock holds the
    directory it names when the rule is made)."""
    python = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path}
    paths = [logdir, *sorted(p for p in python if p), *SYSTEM_READ_PATHS]
    return [p for p in dict.fromkeys(paths) if os.path.exists(p)]


def confine_reads(roots: Iterable[str]) -> None:
    """From now on this process and its children read files and list directories beneath
    `roots` only (Landlock); writing is left as it was. OSError when the kernel cannot."""
    handled = _READ_FILE | _READ_DIR
    attr = _RulesetAttr(handled)
    ruleset = _syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)),
                       ctypes.c_uint32(0))  # fmt: skip
    try:
        for root in roots:
            fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
            try:
                rights = handled if os.path.isdir(root) else _READ_FILE
                rule = _PathBeneath(rights, fd)
                _syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                         ctypes.byref(rule), ctypes.c_uint32(0))  # fmt: skip
            finally:
                os.close(fd)
        if _libc().prctl(_PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0),
                      ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:  # fmt: skip
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        _syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def tensorboard_flags(spec: BoardSpec, *, host: str = "127.0.0.1", port: int = 0) -> list[str]:
    """TensorBoard's own command-line flags for this spec; port 0: any free port."""
    flags = [
        "--logdir", spec.logdir,
        "--load_fast=true",
        "--path_prefix", spec.path_prefix,
        "--host", host,
        "--port", str(port),
        "--reload_interval", str(spec.reload_interval),
    ]  # fmt: skip
    if spec.samples_per_plugin:
        flags += ["--samples_per_plugin", spec.samples_per_plugin]
    return [*flags, *spec.extra_args]


def disabled_plugins(spec: BoardSpec) -> list[str]:
    return sorted(set(OFF_BY_DEFAULT_PLUGINS) - set(spec.plugins))


def board_args(
    spec: BoardSpec, *, host: str = "127.0.0.1", port: int = 0, plugin_path: str | None = None
) -> list[str]:
    """The launcher's arguments: which plugins to leave out, where the extra plugins are
    and which of them to load, then TensorBoard's flags."""
    flags = tensorboard_flags(spec, host=host, port=port)
    extra = [f"{PLUGIN_PATH_FLAG}={plugin_path}"] if plugin_path else []
    if plugin_path and spec.plugins:
        extra.append(f"{ENABLE_FLAG}={','.join(spec.plugins)}")
    return [f"{DISABLE_FLAG}={','.join(disabled_plugins(spec))}", *extra, *flags]


def launcher_command() -> list[str]:
    return [sys.executable, "-m", "tbhub.supervisor.board_process"]


@dataclass(frozen=True)
class LauncherArgs:
    """`board_args` output taken apart."""

    disabled: set[str]
    flags: list[str]  # TensorBoard's own
    plugin_path: str | None = None
    enabled: frozenset[str] = frozenset()  # extra plugins to load


def split_args(args: Sequence[str]) -> LauncherArgs:
    """The launcher's own arguments and TensorBoard's flags from `board_args` output."""
    disabled: set[str] = set()
    enabled: set[str] = set()
    path, flags = None, []
    for arg in args:
        name, _, value = arg.partition("=")
        if name == DISABLE_FLAG:
            disabled |= {n for n in value.split(",") if n}
        elif name == ENABLE_FLAG:
            enabled |= {n for n in value.split(",") if n}
        elif name == PLUGIN_PATH_FLAG:
            path = value or None
        else:
            flags.append(arg)
    return LauncherArgs(disabled, flags, path, frozenset(enabled))


def report_plugin_error(plugin: str, exc: BaseException) -> None:
    """One line of the board's log that the control plane reads (plugin_errors())."""
    error = f"{type(exc).__name__}: {exc}"[:MAX_PLUGIN_ERROR]
    line = json.dumps({"plugin": plugin, "error": error})
    print(f"{PLUGIN_ERROR_MARKER}{line}", file=sys.stderr, flush=True)


def plugin_errors(log: str) -> list[dict[str, str]]:
    """The plugins a board's log says failed to load, from report_plugin_error lines."""
    found = []
    for line in log.splitlines():
        _, marker, rest = line.partition(PLUGIN_ERROR_MARKER)
        if not marker:
            continue
        try:
            item = json.loads(rest)
        except ValueError:
            continue
        if isinstance(item, dict) and {"plugin", "error"} <= item.keys():
            plugin, error = str(item["plugin"])[:64], str(item["error"])[:MAX_PLUGIN_ERROR]
            found.append({"plugin": plugin, "error": error})
    return found


def extra_entry_points(plugin_path: str | None) -> list[Any]:
    """The TensorBoard plugin entry points of the distributions in the extra plugins'
    directory (none when there is no such directory)."""
    if not plugin_path or not os.path.isdir(plugin_path):
        return []
    from importlib import metadata

    return [
        ep
        for dist in metadata.distributions(path=[plugin_path])
        for ep in dist.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]


def extra_plugins(plugin_path: str | None) -> dict[str, str]:
    """The extra plugins by the name projects turn them on by (their entry point's), each
    with the package it comes from."""
    return {
        ep.name: f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else ep.value
        for ep in extra_entry_points(plugin_path)
    }


@functools.cache
def installed_entry_points() -> tuple[Any, ...]:
    """The TensorBoard plugin entry points of tbhub's own environment, read once per process:
    the zygote reads them for every board it forks (each read scans every installed
    distribution's metadata, 10-30 ms of a board's start)."""
    from importlib import metadata

    return tuple(metadata.entry_points(group=ENTRY_POINT_GROUP))


def board_plugins(launcher: LauncherArgs) -> list[Any]:
    """TensorBoard's plugins for this board: the bundled ones (TensorBoard itself leaves out
    one whose loading fails), then, each guarded, the installed dynamic ones (the PyTorch
    profiler, made on its first request: `LAZY_PLUGINS`) and the extra plugins this board
    turned on. One of those that fails to import or load is left out and reported; the board
    serves without it."""
    from tensorboard import default

    extras = extra_entry_points(launcher.plugin_path)
    extra_names = {ep.name for ep in extras}
    installed = [ep for ep in installed_entry_points() if ep.name not in extra_names]
    wanted = [*installed, *(ep for ep in extras if ep.name in launcher.enabled)]
    static = [
        p for p in default.get_static_plugins()
        if getattr(p, "plugin_name", None) not in launcher.disabled
    ]  # fmt: skip
    dynamic = []
    for ep in wanted:
        if {ep.name, ENTRY_POINT_PLUGINS.get(ep.name)} & launcher.disabled:
            continue
        if ep.name in LAZY_PLUGINS:
            dynamic.append(lazy_loader(ep, LAZY_PLUGINS[ep.name], report=report_plugin_error))
            continue
        try:
            dynamic.append(_guarded(ep.name, ep.load(), launcher.disabled))
        except Exception as exc:  # a broken package must not take the board down
            report_plugin_error(ep.name, exc)
    return [*static, *dynamic]


def _guarded(name: str, spec: Any, disabled: set[str]) -> Any:
    """A TensorBoard loader for `spec` that reports (and leaves out) a plugin whose loading
    raises, or whose plugin name is one this board leaves out."""
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin

    class GuardedLoader(base_plugin.TBLoader):
        def __init__(self) -> None:
            try:
                self.inner = application.make_plugin_loader(spec)
            except Exception as exc:  # not a TensorBoard loader or plugin at all
                report_plugin_error(name, exc)
                self.inner = None

        def define_flags(self, parser: Any) -> None:
            self._step(lambda inner: inner.define_flags(parser))  # a flag defined twice raises

        def fix_flags(self, flags: Any) -> None:
            self._step(lambda inner: inner.fix_flags(flags))

        def _step(self, call: Any) -> None:
            """Run one step of loading; a plugin whose step raises is left out."""
            if self.inner is None:
                return
            try:
                call(self.inner)
            except Exception as exc:
                report_plugin_error(name, exc)
                self.inner = None

        def load(self, context: Any) -> Any:
            if self.inner is None:
                return None
            try:
                plugin = self.inner.load(context)
            except Exception as exc:
                report_plugin_error(name, exc)
                return None
            return None if getattr(plugin, "plugin_name", None) in disabled else plugin

    return GuardedLoader()


def raise_open_file_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (TensorBoard #4955)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# The board's HTTP server. TensorBoard's own (Werkzeug's development server) closes the
# connection after every answer and starts a thread per connection; waitress keeps
# connections alive (nginx holds a pool of them per board, nginx/tbhub.conf.j2) and answers
# from a fixed pool of threads.
Middleware = Callable[[Any], Any]  # a WSGI app in, a WSGI app out
SERVER_THREADS = 16  # requests answered at once; TensorBoard's calls are short
SERVER_CONNECTIONS = 1024  # open connections, idle ones included (nginx keeps some)
SERVER_LOOKAHEAD = 5  # requests a connection may queue while one is answered
SERVER_IDLE_SECONDS = 120  # an idle connection is closed after this (nginx lets go at 60 s)


# The requests a board is answering, for the supervisor draining it: idle connections kept
# open by nginx say nothing of that. Outside the board's path prefix, which is all nginx
# routes to a board, so only the host's own processes ask.
IN_FLIGHT_PATH = "/_tbhub/in-flight"


class _Counted:
    """A WSGI app that counts the requests it has not finished answering, body included,
    and tells the count at IN_FLIGHT_PATH."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.in_flight = 0
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") == IN_FLIGHT_PATH:
            headers = [("Content-Type", "text/plain"), ("Cache-Control", "no-store")]
            start_response("200 OK", headers)
            return [str(self.in_flight).encode()]
        with self.lock:
            self.in_flight += 1
        try:
            return _Answer(self.app(environ, start_response), self._done)
        except BaseException:
            self._done()
            raise

    def _done(self) -> None:
        with self.lock:
            self.in_flight -= 1


class _Answer:
    """An answer's body, which tells its app when the server has sent it (or given up)."""

    def __init__(self, body: Any, done: Callable[[], None]) -> None:
        self.body, self.done = body, done

    def __iter__(self) -> Any:
        return iter(self.body)

    def close(self) -> None:
        try:
            if hasattr(self.body, "close"):
                self.body.close()
        finally:
            self.done()


def release_free_heap() -> None:
    """Return free heap pages to the kernel (glibc's `malloc_trim`), where they count in
    no process's memory."""
    malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if malloc_trim is not None:
        malloc_trim(0)


def board_server(
    wsgi_app: Any,
    flags: Any,
    *,
    middleware: Middleware | None = None,
    loading: data_server.FirstLoad | None = None,
) -> Any:
    """TensorBoard's `server_class` hook: the board's WSGI app (wrapped in `middleware`, if
    given) served by waitress, on the host and port of TensorBoard's flags (port 0: one the
    kernel gives). Once `loading` says the first load is over, answers say so (nginx keeps
    only those); without it, none does."""
    import waitress
    from tensorboard import program

    if middleware is not None:
        wsgi_app = middleware(wsgi_app)
    wsgi_app = BoardAssets(wsgi_app, flags.path_prefix or "", installed_assets())
    if loading is not None:
        wsgi_app = data_server.first_load.MarkLoaded(wsgi_app, loading)
    wsgi_app = _Counted(wsgi_app)

    class BoardServer(program.TensorBoardServer):
        def __init__(self) -> None:
            self._server = waitress.create_server(
                wsgi_app, host=flags.host, port=flags.port, threads=SERVER_THREADS,
                connection_limit=SERVER_CONNECTIONS, channel_timeout=SERVER_IDLE_SECONDS,
                asyncore_use_poll=True,  # select() fails past descriptor 1023 (TensorBoard #4955)
                # Without reading ahead, 64 connections at once took a board from 1,300 to
                # 200 requests a second (bench/warm_throughput.py); with it, about 900.
                channel_request_lookahead=SERVER_LOOKAHEAD,
                ident="TensorBoard",
            )  # fmt: skip
            port = self._server.effective_port
            self._url = f"http://{flags.host}:{port}{flags.path_prefix or ''}/"

        def serve_forever(self) -> None:
            release_free_heap()  # what TensorBoard's start-up allocated and let go
            self._server.run()

        def get_url(self) -> str:
            return self._url

        def close(self) -> None:
            self._server.close()

    return BoardServer()


def run_board(args: Sequence[str], *, middleware: Middleware | None = None) -> int:
    """Configure TensorBoard from `board_args` output and serve until stopped. `middleware`
    wraps TensorBoard's WSGI app (bench/leaky_board.py's leak)."""
    from absl import app
    from tensorboard import main_lib, program
    from tensorboard.plugins import base_plugin

    raise_open_file_limit()
    loading = data_server.install()
    launcher = split_args(args)
    flags = launcher.flags
    if launcher.plugin_path and launcher.plugin_path not in sys.path:
        sys.path.append(launcher.plugin_path)  # last: it cannot shadow TensorBoard's own
    if CONFINED_PLUGINS - launcher.disabled:
        launcher.disabled.update(confine_or_disable(flags))
    main_lib.global_init()
    server = functools.partial(board_server, middleware=middleware, loading=loading)
    board = program.TensorBoard(plugins=board_plugins(launcher), server_class=server)
    try:
        app.run(board.main, argv=["tensorboard", *flags], flags_parser=board.configure)
    except base_plugin.FlagsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


PRIVATE_TEMP_PREFIX = "tbhub-board-"


def private_temp_dir() -> str:
    """A temporary directory of this board alone, made the process's TMPDIR: a confined
    board cannot read the shared one (other projects may live there), and TensorBoard reads
    back what it writes there (its data server's port file). Those of boards gone are
    removed first: a board ends by a signal, with no clean-up of its own."""
    shared = tempfile.gettempdir()
    for entry in os.scandir(shared):
        pid = entry.name.removeprefix(PRIVATE_TEMP_PREFIX)
        if entry.name.startswith(PRIVATE_TEMP_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)
    private = os.path.join(shared, f"{PRIVATE_TEMP_PREFIX}{os.getpid()}")
    shutil.rmtree(private, ignore_errors=True)  # a dead board's, under a reused PID
    os.mkdir(private, 0o700)
    os.environ["TMPDIR"] = tempfile.tempdir = private
    return private


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def confine_or_disable(flags: Sequence[str]) -> set[str]:
    """Confine this board to its logdir for the plugins that need it; the plugins to leave
    out when that cannot be done (the reason goes to the board's log). A container board
    is held to its project by its mounts (backends/containers.py) and needs nothing more."""
    if os.environ.get(CONTAINED_ENV) == "mounts":
        return set()
    logdir = flags[flags.index("--logdir") + 1]
    try:
        private = private_temp_dir()
        confine_reads([private, *read_roots(os.path.abspath(logdir))])
    except OSError as exc:
        left_out = ", ".join(sorted(CONFINED_PLUGINS))
        print(f"tbhub: left out {left_out}: this host cannot keep the board from reading "
              f"outside its logdir ({exc}); Landlock needs Linux 5.13+ with landlock in "
              "CONFIG_LSM, or use the container backend", file=sys.stderr)  # fmt: skip
        return set(CONFINED_PLUGINS)
    return set()


if __name__ == "__main__":
    sys.exit(run_board(sys.argv[1:]))
