"""`tbhub admin share ...`: read-only links to one board."""

from __future__ import annotations

from datetime import timedelta

import typer

from tbhub.auth import share_links
from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    emit_line,
    handle_errors,
    print_table,
    runtime_settings,
    time_column,
)

app = typer.Typer(help="Share links: read-only links to one board.", no_args_is_help=True)
ACTOR = "cli"


@app.command("create")
@handle_errors
def create(
    project: str,
    expires_in_hours: float = typer.Option(
        168.0,
        "--expires-in-hours",
        min=0.01,
        max=share_links.MAX_DAYS * 24,
        help="How long the link works (default a week, at most a year).",
    ),
    note: str | None = typer.Option(None, "--note", help="Who it is for (255 characters)."),
    as_json: bool = JsonOption,
) -> None:
    """Make a link; its URL is shown this once."""
    settings = runtime_settings()
    with db_session(settings) as session:
        link, token = share_links.create_link(
            session, project=project, expires_in=timedelta(hours=expires_in_hours), note=note,
            actor=ACTOR,
        )  # fmt: skip
        result = {**share_links.describe(link), "url": f"{settings.public_url}/share/{token}"}
    emit_line(result, f"{result['url']}\n(read-only, {project} only, until "
              f"{result['expires_at']}; shown once: copy it now)", as_json=as_json,
              highlight=False)  # fmt: skip


@app.command("list")
@handle_errors
def list_command(project: str, as_json: bool = JsonOption) -> None:
    """A project's share links (never their URLs: only hashes are kept)."""
    with db_session(runtime_settings()) as session:
        rows = [share_links.describe(k) for k in share_links.list_links(session, project=project)]

    def human() -> None:
        print_table(
            ("id", "state", time_column("expires"), "by", "note"),
            [(str(r["id"]), str(r["state"]), str(r["expires_at"]), str(r["created_by"]),
              str(r["note"] or "")) for r in rows],
            empty=f"{project} has no share links yet; create one with "
                  f"`tbhub admin share create {project}`",
        )  # fmt: skip

    emit(rows, as_json=as_json, human=human)


@app.command("revoke")
@handle_errors
def revoke(project: str, link_id: int, as_json: bool = JsonOption) -> None:
    """Stop a link (on the board within ~15 s of the running server's caches)."""
    with db_session(runtime_settings()) as session:
        share_links.revoke_link(session, project=project, link_id=link_id, actor=ACTOR)
    emit_line({"id": link_id, "state": "revoked"}, f"revoked share link {link_id} of {project}",
              as_json=as_json)  # fmt: skip
