"""`tbhub admin compose-images build`: the images docker-compose.yml runs (stack_images.py)."""

from __future__ import annotations

import typer
from rich.table import Table

from tbhub.artifacts.rootfs import Progress
from tbhub.artifacts.stack_images import build_stack_images
from tbhub.cli.common import JsonOption, emit, err_console, handle_errors, out_console
from tbhub.supervisor.backends.select import docker_client
from tbhub.supervisor.board_image import IMAGE_REPOSITORY, build_board_image

app = typer.Typer(
    help="The images docker-compose.yml runs, built on this machine.", no_args_is_help=True
)
# The .env variable naming each image; docker-compose.yml defaults to <repository>:local.
VARIABLES = {
    "tbhub-server": "TBHUB_SERVER_IMAGE",
    "tbhub-postgres": "TBHUB_POSTGRES_IMAGE",
    "tbhub-nginx": "TBHUB_NGINX_IMAGE",
    IMAGE_REPOSITORY: "TBHUB_BOARD_IMAGE",
}


@app.command("build")
@handle_errors
def build_command(
    force: bool = typer.Option(False, "--force", help="Build even if the images exist."),
    as_json: bool = JsonOption,
) -> None:
    """Build tbhub-server, tbhub-postgres, tbhub-nginx and the board image from what this
    machine has installed (nothing is pulled), and tag each `:local`."""
    client = docker_client()
    rows: list[dict[str, object]] = []

    def build(progress: Progress) -> None:
        board = build_board_image(client, force=force, progress=progress)
        client.images.get(board.tag).tag(IMAGE_REPOSITORY, "local")
        rows.append({"repository": IMAGE_REPOSITORY, "image": board.tag, "built": board.built,
                     "seconds": round(board.seconds, 2)})  # fmt: skip
        for result in build_stack_images(client, force=force, progress=progress):
            rows.append({"repository": result.repository, "image": result.tag,
                         "built": result.built, "seconds": round(result.seconds, 2)})  # fmt: skip

    try:
        if as_json:
            build(lambda _line: None)
        else:
            with err_console.status("building the compose images") as status:
                build(status.update)
    finally:
        client.close()
    for row in rows:
        row["variable"] = VARIABLES[str(row["repository"])]

    def human() -> None:
        table = Table("image", "also tagged", ".env variable", "built")
        for row in rows:
            built = f"{row['seconds']}s" if row["built"] else "existed"
            table.add_row(str(row["image"]), f"{row['repository']}:local",
                          str(row["variable"]), built)  # fmt: skip
        out_console.print(table)

    emit({"images": rows}, as_json=as_json, human=human)
