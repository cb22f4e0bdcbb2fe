"""What runs inside a board process: the spec turned into TensorBoard's flags, and the launcher.

`board_args(spec)` is the one place a spec becomes TensorBoard arguments. Every way of
starting a board uses it: `python -m tbhub.supervisor.board_process <args>` (the local
backend's exec) and any in-process start (a forked child calls `run_board(args)`).

The launcher adds what plain `tensorboard` cannot do from flags:
- plugins that are off by default stay unloaded unless the project opted in: the projector
  reads `model_checkpoint_path` outside the logdir (TensorBoard #7119, still open);
- the soft RLIMIT_NOFILE is raised to the hard one: RustBoard keeps one descriptor per live
  event file (TensorBoard #4955).
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the board image holds this module alone of tbhub (board_image.py)
    from tbhub.supervisor.model import BoardSpec

# Plugins a board loads only when its project opts in, and why each is off.
OFF_BY_DEFAULT_PLUGINS = {
    "projector": "reads checkpoint files outside the logdir (TensorBoard #7119)",
}
DISABLE_FLAG = "--tbhub_disable_plugins"


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


def board_args(spec: BoardSpec, *, host: str = "127.0.0.1", port: int = 0) -> list[str]:
    """The launcher's arguments: which plugins to leave out, then TensorBoard's flags."""
    flags = tensorboard_flags(spec, host=host, port=port)
    return [f"{DISABLE_FLAG}={','.join(disabled_plugins(spec))}", *flags]


def launcher_command() -> list[str]:
    return [sys.executable, "-m", "tbhub.supervisor.board_process"]


def split_args(args: Sequence[str]) -> tuple[set[str], list[str]]:
    """(plugins to leave out, TensorBoard flags) from `board_args` output."""
    disabled: set[str] = set()
    flags = []
    for arg in args:
        if arg.startswith(f"{DISABLE_FLAG}="):
            disabled |= {name for name in arg.split("=", 1)[1].split(",") if name}
        else:
            flags.append(arg)
    return disabled, flags


def raise_open_file_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit (TensorBoard #4955)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_board(args: Sequence[str], *, server_class: Any = None) -> int:
    """Configure TensorBoard from `board_args` output and serve until stopped.

    `server_class` is TensorBoard's own hook for wrapping its WSGI server (tests use it)."""
    from absl import app
    from tensorboard import default, main_lib, program
    from tensorboard.plugins import base_plugin

    raise_open_file_limit()
    disabled, flags = split_args(args)
    main_lib.global_init()
    plugins = [p for p in default.get_plugins() if getattr(p, "plugin_name", None) not in disabled]
    board = program.TensorBoard(plugins=plugins, server_class=server_class)
    try:
        app.run(board.main, argv=["tensorboard", *flags], flags_parser=board.configure)
    except base_plugin.FlagsError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_board(sys.argv[1:]))
