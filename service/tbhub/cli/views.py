"""`tbhub views list|create|delete`: saved views of a project, each a board over the runs its
filter matches, over the API."""

from __future__ import annotations

from typing import Any

import typer

from tbhub.cli.common import JsonOption, emit, emit_line, handle_errors, print_table
from tbhub.client import Client

app = typer.Typer(help="Saved views of a project: boards over the runs a filter matches.",
                  no_args_is_help=True)  # fmt: skip
ProjectOption = typer.Option(..., "--project", "-p", envvar="TBHUB_PROJECT",
                             help="The project.")  # fmt: skip


def absolute(client: Client, view: dict[str, Any]) -> dict[str, Any]:
    """The view with its board and page as full addresses, to open from anywhere."""
    base = client.config.url.rstrip("/")
    return {**view, "board_url": base + str(view["board_url"]), "link": base + str(view["link"])}


@app.command("list")
@handle_errors
def list_(project: str = ProjectOption, as_json: bool = JsonOption) -> None:
    """The project's views you may use: shared ones and your own."""
    with Client() as client:
        views = [absolute(client, v) for v in client.list_views(project)]

    def human() -> None:
        print_table(
            ("id", "name", "runs", "shared", "owner", "board"),
            [(str(v["id"]), v["name"], str(v["runs"]), "yes" if v["shared"] else "no",
              v["owner"], v["board_url"]) for v in views],
            empty=f"no views of {project} yet; make one with `tbhub views create -p {project} "
            "--name NAME --status running`",
        )  # fmt: skip

    emit(views, as_json=as_json, human=human)


@app.command("create")
@handle_errors
def create(
    project: str = ProjectOption,
    name: str = typer.Option(..., "--name", "-n", help="The view's name in the project."),
    shared: bool = typer.Option(False, "--shared", help="List it to every reader of the project."),
    status: list[str] = typer.Option([], "--status", help="running, finished, ... (repeat)."),
    tag: str | None = typer.Option(None, "--tag", help="Only runs with this tag."),
    group: str | None = typer.Option(None, "--group", help="Only runs in this group."),
    query: str | None = typer.Option(None, "--query", "-q", help="Text in path or notes."),
    since: str | None = typer.Option(None, "--since", help="Registered at or after (ISO 8601)."),
    until: str | None = typer.Option(None, "--until", help="Registered before (ISO 8601)."),
    param: list[str] = typer.Option(
        [], "--param", help="A condition such as hparam.lr=0.1 or metric.acc>=0.9 (repeat)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Make a view: a board over the runs this filter matches, following new and trashed
    runs; print its board's address."""
    flt = {"status": status, "tag": tag, "group": group, "q": query, "since": since,
           "until": until, "params": param}  # fmt: skip
    with Client() as client:
        view = absolute(client, client.create_view(project, name, shared=shared, filter=flt))
    emit_line(view, f"view {view['id']} of {project} ({view['runs']} runs): "
                    f"{view['board_url']}", as_json=as_json, highlight=False)  # fmt: skip


@app.command("delete")
@handle_errors
def delete(
    view_id: int = typer.Argument(..., min=1, help="The view's id (`tbhub views list`)."),
    project: str = ProjectOption,
    as_json: bool = JsonOption,
) -> None:
    """Delete a view (yours, or any as an owner of the project); its board stops."""
    with Client() as client:
        client.delete_view(project, view_id)
    emit_line({"deleted": view_id, "project": project},
              f"deleted view {view_id} of {project}", as_json=as_json)  # fmt: skip
