"""`tbhub admin board ...`: what the supervisor sees of each board, and why one failed."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    handle_errors,
    out_console,
    runtime_settings,
)
from tbhub.models import Project
from tbhub.projects import get_project, list_projects

app = typer.Typer(help="Boards: desired and observed state, failures.", no_args_is_help=True)


def describe(project: Project) -> dict[str, Any]:
    board = project.board
    assert board is not None
    return {
        "project": project.name,
        "desired": board.desired_state.value,
        "observed": board.observed_state.value,
        "upstream": board.upstream,
        "last_access_at": board.last_access_at,
        "failures": board.failures,
        "retry_at": board.retry_at,
        "last_error": board.last_error,
    }


@app.command("list")
@handle_errors
def board_list(as_json: bool = JsonOption) -> None:
    """List every board with its desired and observed state."""
    with db_session(runtime_settings()) as session:
        rows = [describe(p) for p in list_projects(session)]

    def human() -> None:
        table = Table("project", "desired", "observed", "upstream", "last access", "failures")
        for row in rows:
            table.add_row(
                row["project"], row["desired"], row["observed"], row["upstream"] or "",
                str(row["last_access_at"] or ""), str(row["failures"]),
            )  # fmt: skip
        out_console.print(table)

    emit(rows, as_json=as_json, human=human)


@app.command("status")
@handle_errors
def board_status(project: str, as_json: bool = JsonOption) -> None:
    """Show one board, with the last lines it printed if it failed."""
    with db_session(runtime_settings()) as session:
        row = describe(get_project(session, name=project))

    def human() -> None:
        for key, value in row.items():
            if key != "last_error":
                out_console.print(f"{key}: {value if value is not None else '-'}")
        if row["last_error"]:
            out_console.print("last error:")
            out_console.print(row["last_error"], markup=False, highlight=False)

    emit(row, as_json=as_json, human=human)
