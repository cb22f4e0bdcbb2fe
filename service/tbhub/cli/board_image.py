"""`tbhub admin board-image build`: the image containerised boards run (board_image.py)."""

from __future__ import annotations

import typer

from tbhub.cli.common import JsonOption, emit_line, err_console, handle_errors
from tbhub.supervisor.backends.select import docker_client
from tbhub.supervisor.board_image import build_board_image

app = typer.Typer(help="The board image containerised boards run.", no_args_is_help=True)


@app.command("build")
@handle_errors
def build_command(
    force: bool = typer.Option(False, "--force", help="Build even if the image exists."),
    as_json: bool = JsonOption,
) -> None:
    """Build the board image from this Python and TensorBoard, unless it exists already."""
    client = docker_client()
    try:
        if as_json:
            result = build_board_image(client, force=force)
        else:
            with err_console.status("building the board image") as status:
                result = build_board_image(client, force=force, progress=status.update)
    finally:
        client.close()
    emit_line(
        {"image": result.tag, "built": result.built, "seconds": round(result.seconds, 2),
         "files": result.files},
        f"built {result.tag} ({result.files} files) in {result.seconds:.1f}s"
        if result.built else f"{result.tag} exists already; nothing to build",
        as_json=as_json,
    )  # fmt: skip
