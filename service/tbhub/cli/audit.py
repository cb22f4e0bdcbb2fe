"""`tbhub admin audit list`: who did what, newest first."""

from __future__ import annotations

import typer

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    handle_errors,
    print_table,
    runtime_settings,
    time_column,
)
from tbhub.domain import audit

app = typer.Typer(help="The audit log: sign-ins, tokens, members, boards, retention, backups.",
                  no_args_is_help=True)  # fmt: skip


@app.command("list")
@handle_errors
def list_command(
    user: str | None = typer.Option(None, "--user", help="Who acted, or whom it was about."),
    project: str | None = typer.Option(None, "--project", "-p", help="A project and its runs."),
    action: str | None = typer.Option(None, "--action", help="An action prefix, e.g. auth."),
    since: str | None = typer.Option(None, "--since", help="ISO 8601 time, e.g. 2026-12-01."),
    until: str | None = typer.Option(None, "--until", help="Only events before this time."),
    limit: int = typer.Option(100, "--limit", min=1, max=audit.MAX_PAGE, help="At most this many."),
    as_json: bool = JsonOption,
) -> None:
    """Audit events, newest first."""
    with db_session(runtime_settings()) as session:
        rows = [audit.as_dict(e) for e in audit.list_events(
            session, user=user, project=project, action=action, since=audit.parse_time(since),
            until=audit.parse_time(until, "until"), limit=limit)]  # fmt: skip

    def human() -> None:
        filtered = any(f is not None for f in (user, project, action, since))
        print_table(
            ("id", time_column("at"), "actor", "action", "target"),
            [(str(r["id"]), r["at"], r["actor"], r["action"], r["target"]) for r in rows],
            empty="no audit events match; try fewer filters or an earlier --since"
            if filtered else "no audit events yet",
        )  # fmt: skip

    emit(rows, as_json=as_json, human=human)
