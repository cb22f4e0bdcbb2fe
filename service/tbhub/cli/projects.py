"""`tbhub projects list`: the projects a token (or login) reaches, over the API."""

from __future__ import annotations

from typing import Any

import typer

from tbhub.cli.common import JsonOption, emit, handle_errors, print_table
from tbhub.client import Client

app = typer.Typer(help="Projects you can reach, over the API (needs `tbhub login`).",
                  no_args_is_help=True)  # fmt: skip


@app.command("list")
@handle_errors
def list_(as_json: bool = JsonOption) -> None:
    """Projects your token reaches: your role, the board's state and address, the logdir."""
    with Client() as client:
        projects = client.list_projects()
        base = client.config.url.rstrip("/")

    def human() -> None:
        print_table(
            ("project", "role", "board", "address", "logdir"),
            [(p["name"], p["role"] or "admin", _board_state(p), base + p["board_url"],
              p["logdir"]) for p in projects],
            empty="no projects reachable: ask a project's owner to add you, or for a token "
            "that names the project (`tbhub admin token create --project P`)",
        )  # fmt: skip

    emit(projects, as_json=as_json, human=human)


def _board_state(project: dict[str, Any]) -> str:
    board = project.get("board")
    return str(board["state"]) if board else "stopped"
