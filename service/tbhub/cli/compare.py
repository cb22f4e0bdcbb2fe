"""`tbhub compare PROJECT/RUN_ID ...`: a compare board over runs of several projects."""

from __future__ import annotations

from typing import Any

import typer

from tbhub.cli.common import JsonOption, emit, out_console
from tbhub.client import Client


def compare(
    runs: list[str] = typer.Argument(
        ..., metavar="PROJECT/RUN_ID...", help="Runs to compare, e.g. vision/12 speech/3."
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="A name to find it by."),
    as_json: bool = JsonOption,
) -> None:
    """Make (or find) the compare board over these runs and print its address."""
    with Client() as client:
        board: dict[str, Any] = client.compare(runs, name=name)
        board["board_url"] = client.config.url.rstrip("/") + str(board["board_url"])

    def human() -> None:
        out_console.print(board["board_url"], highlight=False, soft_wrap=True)
        for run in board["runs"]:
            out_console.print(f"  {run['ref']:<20} shown as {run['board_run']}", highlight=False)

    emit(board, as_json=as_json, human=human)
