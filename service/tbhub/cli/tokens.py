"""`tbhub admin token create|list|revoke`: API tokens, for operators."""

from __future__ import annotations

from datetime import UTC, datetime

import typer

from tbhub.auth.tokens import (
    create_token,
    expiry_from_days,
    get_token,
    list_tokens,
    parse_scope,
    revoke_token,
    token_summary,
)
from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    emit_line,
    err_console,
    handle_errors,
    print_table,
    runtime_settings,
    time_column,
)
from tbhub.domain.projects import get_project
from tbhub.domain.users import get_user

app = typer.Typer(help="API tokens for training jobs and scripts.", no_args_is_help=True)
ACTOR = "cli"


@app.command("create")
@handle_errors
def token_create(
    user: str = typer.Option(..., "--user", help="The user the token acts for."),
    project: list[str] = typer.Option(..., "--project", help="A project it may act on (repeat)."),
    scope: str = typer.Option("write", "--scope", help="read (viewer) or write (editor)."),
    name: str = typer.Option("cli", "--name", help="A label to tell tokens apart."),
    expires_days: float | None = typer.Option(None, "--expires-days", help="Expire after N days."),
    as_json: bool = JsonOption,
) -> None:
    """Mint a token and print it once: tbhub keeps only its hash."""
    parsed = parse_scope(scope)
    with db_session(runtime_settings()) as session:
        token, secret = create_token(
            session,
            user=get_user(session, name=user),
            name=name,
            scope=parsed,
            projects=project,
            expires_at=expiry_from_days(expires_days, datetime.now(UTC)),
            actor=ACTOR,
        )
        result = {**token_summary(token), "token": secret}

    def human() -> None:
        err_console.print(
            f"token {result['id']} ({parsed.value} on {', '.join(project)}) for {user}; "
            "it is shown only now:"
        )
        print(secret)

    emit(result, as_json=as_json, human=human)


@app.command("list")
@handle_errors
def token_list(
    user: str | None = typer.Option(None, "--user", help="Only this user's tokens."),
    project: str | None = typer.Option(None, "--project", help="Only tokens acting on it."),
    as_json: bool = JsonOption,
) -> None:
    """List tokens (never their secrets)."""
    with db_session(runtime_settings()) as session:
        user_id = get_user(session, name=user).id if user else None
        project_id = get_project(session, name=project).id if project else None
        rows = [
            token_summary(t) for t in list_tokens(session, user_id=user_id, project_id=project_id)
        ]

    def human() -> None:
        print_table(
            ("id", "name", "user", "scope", "projects", "state", time_column("expires"),
             time_column("last used")),
            [(str(r["id"]), r["name"], r["user"], r["scope"], ", ".join(r["projects"]),
              r["state"], r["expires_at"] or "never", r["last_used_at"] or "never")
             for r in rows],
            empty="no tokens match; try without --user or --project" if user or project else
            "no tokens yet; create one with `tbhub admin token create --user USER --project "
            "PROJECT`",
        )  # fmt: skip

    emit(rows, as_json=as_json, human=human)


@app.command("revoke")
@handle_errors
def token_revoke(token_id: int, as_json: bool = JsonOption) -> None:
    """Revoke a token; running servers refuse it within 10 seconds."""
    with db_session(runtime_settings()) as session:
        token = revoke_token(session, token=get_token(session, token_id), actor=ACTOR)
        result = token_summary(token)
    emit_line(result, f"revoked token {token_id}", as_json=as_json)
