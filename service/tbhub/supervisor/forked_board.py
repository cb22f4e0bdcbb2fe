"""What a process forked by the board zygote does to become the board an exec would start.

A new session, default signal handling, stdin from /dev/null and stdout/stderr into the
board's log, no inherited descriptors, fresh random seeds, the board's labels, then the
board program run in process the way the interpreter runs it after an exec. It never
returns into zygote code: it ends in `os._exit` after the atexit handlers ran.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import random
import re
import runpy
import signal
import socket
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.machinery import ModuleSpec
from typing import Any, Literal, NoReturn

# The zygote is started with this variable as a placeholder in its environment block; each
# board overwrites it in place with its labels, since /proc/<pid>/environ shows that block.
SLOT_ENV = "TBHUB_ZYGOTE_SLOT"
PAD_ENV = "TBHUB_PAD"
PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")


def slot_width(labels: Mapping[str, str], *, spare: int) -> int:
    """Characters the placeholder needs so that `labels` (plus `spare` more) fit into it."""
    entries = sum(len(k) + 1 + len(v) + 1 for k, v in labels.items())
    return entries + len(PAD_ENV) + 1 + spare


def become_board(
    request: dict[str, Any], *, close: Sequence[socket.socket], drop_env: Sequence[str]
) -> NoReturn:
    """Turn this fresh fork into the board process the exec launcher would have started."""
    code = 1
    try:
        os.setsid()
        _reset_signals()
        for sock in close:
            sock.detach()  # their fds are closed below; the objects must never close them
        _redirect_stdio(request["log_path"])
        os.closerange(3, _fd_limit())
        relabel_environ(request["labels"], drop_env=drop_env)
        random.seed()
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None:  # not imported yet: it seeds itself when it is
            numpy_random.seed()
        code = run_program(request["program"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # the board's log is the place to explain why it died
        import traceback

        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # TensorBoard removes its .tensorboard-info file here
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


@dataclass(frozen=True)
class Program:
    """A program this interpreter runs: `python -m <target> args` or `<target script> args`."""

    kind: Literal["module", "script"]
    target: str
    args: tuple[str, ...]


def in_process_program(argv: Sequence[str]) -> Program | None:
    """How argv would run if it runs on this very interpreter (this venv's python by path,
    or a script whose `#!` line names it), else None: such argv can be forked, not others."""
    if len(argv) >= 3 and _is_this_python(argv[0]) and argv[1] == "-m":
        return Program("module", argv[2], tuple(argv[3:]))
    if argv and _is_this_python(_shebang(argv[0])):
        return Program("script", argv[0], tuple(argv[1:]))
    return None


# Modules compiled once in the zygote (`precompile`), run by every board forked from it:
# without a .pyc (PYTHONDONTWRITEBYTECODE, a read-only install) each board compiled the
# launcher again, 5-8 ms of every start.
_COMPILED: dict[str, tuple[ModuleSpec, types.CodeType]] = {}


def precompile(module: str) -> None:
    """Compile `module`'s code now, for the boards this process forks to run as __main__."""
    spec = importlib.util.find_spec(module)
    code = spec.loader.get_code(module) if spec and spec.loader else None  # type: ignore[attr-defined]
    if spec is not None and code is not None:
        _COMPILED[module] = (spec, code)


def run_program(program: Program) -> int:
    """Run the program in this process as the interpreter would after an exec."""
    if program.kind == "module":
        sys.argv = ["-m", *program.args]  # run_module puts the module's path first
        sys.path.insert(0, "")  # `python -m` puts the working directory first
        if program.target in _COMPILED:
            _run_as_main(*_COMPILED[program.target])
        else:
            runpy.run_module(program.target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [program.target, *program.args]
        sys.path.insert(0, os.path.dirname(os.path.abspath(program.target)))
        runpy.run_path(program.target, run_name="__main__")
    return 0


def _run_as_main(spec: ModuleSpec, code: types.CodeType) -> None:
    """What `runpy.run_module(alter_sys=True, run_name="__main__")` does, with code compiled
    before: a fresh __main__ module in sys.modules, sys.argv[0] its file. This process never
    returns to the zygote, so nothing is put back."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader,
                         __package__=spec.parent, __spec__=spec)  # fmt: skip
    sys.modules["__main__"] = main
    sys.argv[0] = spec.origin or sys.argv[0]
    exec(code, main.__dict__)


def _is_this_python(path: str | None) -> bool:
    """The same interpreter in the same environment: the venv's bin dir, a python name."""
    if not path or not PYTHON_NAME.fullmatch(os.path.basename(path)):
        return False
    here = os.path.dirname(sys.executable)
    try:
        return os.path.samefile(os.path.dirname(path), here)
    except OSError:
        return False


def _shebang(path: str) -> str | None:
    """The interpreter of a `#!/path/to/python` script with no arguments on that line."""
    try:
        with open(path, "rb") as script:
            first = script.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    return os.fsdecode(words[0]) if len(words) == 1 else None


def _reset_signals() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has it
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # likewise


def _redirect_stdio(log_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)


def _fd_limit() -> int:
    return int(os.sysconf("SC_OPEN_MAX"))


def relabel_environ(labels: Mapping[str, str], *, drop_env: Sequence[str] = ()) -> None:
    """Give this process the environment labels an exec'd board has.

    os.environ serves the data server TensorBoard spawns. The process's own labels must show
    in /proc/<pid>/environ, which is the environment block the zygote was exec'd with, so the
    placeholder entry SLOT_ENV in that block is overwritten in place by the labels and a
    padding variable, NUL-separated, keeping its length.
    """
    for name in (SLOT_ENV, *drop_env):
        os.environ.pop(name, None)
    os.environ.update(labels)
    start, end = _environ_bounds()
    block = ctypes.string_at(start, end - start)
    entry = SLOT_ENV.encode() + b"="
    offset = (b"\0" + block).find(b"\0" + entry)  # where the entry starts in block
    if offset < 0:
        raise RuntimeError(f"{SLOT_ENV} is not in the environment block; cannot label the board")
    width = block.index(b"\0", offset) - offset
    labelled = b"\0".join(f"{k}={v}".encode() for k, v in labels.items())
    padding = width - len(labelled) - len(f"\0{PAD_ENV}=")
    if padding < 0:
        raise RuntimeError(f"the labels need {width - padding} bytes; {SLOT_ENV} holds {width}")
    ctypes.memmove(start + offset, labelled + f"\0{PAD_ENV}=".encode() + b"x" * padding, width)


def _environ_bounds() -> tuple[int, int]:
    """env_start and env_end of this process (fields 50 and 51 of /proc/self/stat)."""
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    return int(fields[47]), int(fields[48])
