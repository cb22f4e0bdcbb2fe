"""`tbhub admin team ...`: teams, their members, and their roles in projects."""

from __future__ import annotations

from typing import Any

import typer

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    emit_line,
    handle_errors,
    print_table,
    runtime_settings,
)
from tbhub.domain import teams
from tbhub.domain.projects import parse_role

app = typer.Typer(help="Teams: people who get project roles together.", no_args_is_help=True)
ACTOR = "cli"


@app.command("create")
@handle_errors
def create(name: str, as_json: bool = JsonOption) -> None:
    """Create a team."""
    with db_session(runtime_settings()) as session:
        teams.create_team(session, name=name, actor=ACTOR)
    emit_line({"team": name}, f"created team {name}", as_json=as_json, highlight=False)


@app.command("delete")
@handle_errors
def delete(name: str, as_json: bool = JsonOption) -> None:
    """Delete a team: its members lose the roles they had through it."""
    with db_session(runtime_settings()) as session:
        teams.delete_team(session, name=name, actor=ACTOR)
    emit_line({"team": name, "deleted": True}, f"deleted team {name}", as_json=as_json,
              highlight=False)  # fmt: skip


@app.command("add-member")
@handle_errors
def add_member(team: str, user: str, as_json: bool = JsonOption) -> None:
    """Add a user to a team."""
    with db_session(runtime_settings()) as session:
        teams.add_member(session, team=team, user=user, actor=ACTOR)
    emit_line({"team": team, "user": user}, f"{user} is in team {team}", as_json=as_json,
              highlight=False)  # fmt: skip


@app.command("remove-member")
@handle_errors
def remove_member(team: str, user: str, as_json: bool = JsonOption) -> None:
    """Take a user out of a team."""
    with db_session(runtime_settings()) as session:
        teams.remove_member(session, team=team, user=user, actor=ACTOR)
    emit_line({"team": team, "user": user, "removed": True}, f"{user} left team {team}",
              as_json=as_json, highlight=False)  # fmt: skip


@app.command("grant")
@handle_errors
def grant(
    team: str,
    project: str,
    role: str = typer.Option(..., "--role", help="viewer, editor or owner."),
    as_json: bool = JsonOption,
) -> None:
    """Give a team a role in a project (or change it)."""
    with db_session(runtime_settings()) as session:
        teams.grant(session, project=project, team=team, role=parse_role(role), actor=ACTOR)
    emit_line({"team": team, "project": project, "role": role},
              f"team {team} is {role} of {project}", as_json=as_json, highlight=False)  # fmt: skip


@app.command("revoke")
@handle_errors
def revoke(team: str, project: str, as_json: bool = JsonOption) -> None:
    """Take a team's role in a project away."""
    with db_session(runtime_settings()) as session:
        teams.revoke(session, project=project, team=team, actor=ACTOR)
    emit_line({"team": team, "project": project, "revoked": True},
              f"team {team} has no role in {project} now", as_json=as_json,
              highlight=False)  # fmt: skip


@app.command("list")
@handle_errors
def list_command(as_json: bool = JsonOption) -> None:
    """Teams with their members and project roles."""
    with db_session(runtime_settings()) as session:
        rows = teams.list_teams(session)

    def line(row: dict[str, Any]) -> tuple[str, str, str]:
        members = ", ".join(f"{m['user']}{' (oidc)' if m['source'] == 'oidc' else ''}"
                            for m in row["members"])  # fmt: skip
        return str(row["name"]), members, ", ".join(f"{p}: {r}" for p, r in row["roles"].items())

    emit(rows, as_json=as_json, human=lambda: print_table(
        ("team", "members", "roles"), [line(r) for r in rows],
        empty="no teams yet; create one with `tbhub admin team create NAME`"))  # fmt: skip
