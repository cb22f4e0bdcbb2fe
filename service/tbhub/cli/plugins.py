"""`tbhub admin plugins`: the operator's extra TensorBoard plugins (TBHUB_BOARD_PLUGINS)."""

from __future__ import annotations

import typer

from tbhub.cli.common import JsonOption, emit_line, err_console, handle_errors, runtime_settings
from tbhub.supervisor.board_plugins import install_plugins
from tbhub.supervisor.board_process import extra_plugins

NONE_INSTALLED = (
    "no extra plugins installed; list them in TBHUB_BOARD_PLUGINS and run "
    "`tbhub admin plugins install`"
)
app = typer.Typer(help="Extra TensorBoard plugins boards may load.", no_args_is_help=True)


@app.command("install")
@handle_errors
def install_command(
    image: bool = typer.Option(
        True, "--image/--no-image", help="Also rebuild the board image (docker and swarm)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Install TBHUB_BOARD_PLUGINS for the boards (and into the board image when boards run
    in containers). Boards started afterwards can load them; a project turns each on with
    `tbhub admin board set <project> --plugin <name>`."""
    settings = runtime_settings()
    with err_console.status("installing the board plugins"):
        found = install_plugins(settings.board_plugins, settings.board_plugin_dir)
    tag = None
    if image and settings.board_backend != "subprocess" and not settings.board_image:
        from tbhub.supervisor.backends.select import docker_client
        from tbhub.supervisor.board_image import build_board_image

        client = docker_client()
        try:
            with err_console.status("building the board image") as status:
                tag = build_board_image(
                    client, progress=status.update, plugin_dir=settings.board_plugin_dir
                ).tag
        finally:
            client.close()
    names = ", ".join(f"{n} ({p})" for n, p in sorted(found.items())) or "none"
    emit_line(
        {"plugins": found, "image": tag},
        f"board plugins installed: {names}" + (f"; board image {tag}" if tag else ""),
        as_json=as_json,
    )


@app.command("list")
@handle_errors
def list_command(as_json: bool = JsonOption) -> None:
    """The extra plugins installed, by the name projects turn them on by."""
    found = extra_plugins(str(runtime_settings().board_plugin_dir))
    emit_line(
        {"plugins": found},
        "\n".join(f"{n}\t{p}" for n, p in sorted(found.items())) or NONE_INSTALLED,
        as_json=as_json,
    )
