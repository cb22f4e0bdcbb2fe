"""`tbhub admin ...`: users and projects, for operators."""

from __future__ import annotations

import sys

import typer

from tbhub.cli import alerts as alerts_cli
from tbhub.cli import audit as audit_cli
from tbhub.cli import backup as backup_cli
from tbhub.cli import board_image as board_image_cli
from tbhub.cli import boards as boards_cli
from tbhub.cli import compose_images as compose_images_cli
from tbhub.cli import plugins as plugins_cli
from tbhub.cli import replicas as replicas_cli
from tbhub.cli import retention as retention_cli
from tbhub.cli import share as share_cli
from tbhub.cli import teams as teams_cli
from tbhub.cli import tokens as tokens_cli
from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    emit_line,
    handle_errors,
    human_bytes,
    print_table,
    runtime_settings,
    session_factory,
)
from tbhub.core.errors import InvalidInput
from tbhub.domain.projects import (
    create_project,
    list_projects,
    parse_role,
    remove_membership,
    set_membership,
)
from tbhub.domain.users import (
    create_user,
    delete_user,
    end_sessions,
    list_users,
    set_admin,
    set_disabled,
    set_password,
)

app = typer.Typer(
    help="Operator commands: replicas, users, projects, boards, board plugins and the board "
    "image, the "
    "docker compose images, retention, trash, backups, the audit log, teams, share links, "
    "API tokens and run-health alerts.",
    no_args_is_help=True,
)
user_app = typer.Typer(help="Local user accounts.", no_args_is_help=True)
project_app = typer.Typer(help="Projects and their members.", no_args_is_help=True)
app.add_typer(user_app, name="user")
app.add_typer(project_app, name="project")
app.add_typer(boards_cli.app, name="board")
app.add_typer(board_image_cli.app, name="board-image")
app.add_typer(compose_images_cli.app, name="compose-images")
app.add_typer(plugins_cli.app, name="plugins")
app.add_typer(retention_cli.app, name="retention")
app.add_typer(retention_cli.trash_app, name="trash")
app.add_typer(backup_cli.app, name="backup")
app.add_typer(audit_cli.app, name="audit")
app.add_typer(teams_cli.app, name="team")
app.add_typer(share_cli.app, name="share")
app.add_typer(tokens_cli.app, name="token")
app.add_typer(alerts_cli.admin_app, name="alerts")
app.command("replicas")(replicas_cli.replicas)

ACTOR = "cli"
NO_PROJECTS = "no projects yet; create one with `tbhub admin project create NAME`"


def read_password_stdin() -> str:
    password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise InvalidInput(
            'no password on standard input; pipe one in, e.g. `echo "$PW" | tbhub ...`'
        )
    return password


@user_app.command("create")
@handle_errors
def user_create(
    name: str,
    admin: bool = typer.Option(False, "--admin", help="Make the user an instance admin."),
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="Read the password from the first line of stdin."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Create a local account."""
    if not password_stdin:
        raise InvalidInput("pass --password-stdin and pipe the password in; it is never a flag")
    password = read_password_stdin()
    settings = runtime_settings()
    with db_session(settings) as session:
        user = create_user(session, name=name, password=password, is_admin=admin, actor=ACTOR)
        result = {"name": user.name, "is_admin": user.is_admin}
    emit_line(result, f"created user {name}", as_json=as_json)


@user_app.command("list")
@handle_errors
def user_list(as_json: bool = JsonOption) -> None:
    """List accounts."""
    with db_session(runtime_settings()) as session:
        rows = [{"name": u.name, "is_admin": u.is_admin} for u in list_users(session)]

    def human() -> None:
        print_table(("name", "admin"),
                    [(str(r["name"]), "yes" if r["is_admin"] else "") for r in rows],
                    empty="no users yet; create one with "
                          "`tbhub admin user create NAME --password-stdin`")  # fmt: skip

    emit(rows, as_json=as_json, human=human)


def _set_flag(name: str, flag: str, value: bool, message: str, as_json: bool) -> None:
    """Set `disabled` or `is_admin` of an account, with the service function the API uses."""
    setter = set_disabled if flag == "disabled" else set_admin
    with db_session(runtime_settings()) as session:
        setter(session, name=name, actor=ACTOR, **{flag: value})
    emit_line({"name": name, flag: value}, message, as_json=as_json, highlight=False)


@user_app.command("disable")
@handle_errors
def user_disable(name: str, as_json: bool = JsonOption) -> None:
    """Disable an account: it keeps its data but gets in nowhere, from now on."""
    _set_flag(name, "disabled", True, f"disabled {name}", as_json)


@user_app.command("enable")
@handle_errors
def user_enable(name: str, as_json: bool = JsonOption) -> None:
    """Enable a disabled account again."""
    _set_flag(name, "disabled", False, f"enabled {name}", as_json)


@user_app.command("make-admin")
@handle_errors
def user_make_admin(name: str, as_json: bool = JsonOption) -> None:
    """Make an account an instance admin."""
    _set_flag(name, "is_admin", True, f"{name} is now an instance admin", as_json)


@user_app.command("remove-admin")
@handle_errors
def user_remove_admin(name: str, as_json: bool = JsonOption) -> None:
    """Make an admin a plain user again (never the last enabled admin)."""
    _set_flag(name, "is_admin", False, f"{name} is no longer an instance admin", as_json)


@user_app.command("delete")
@handle_errors
def user_delete(name: str, as_json: bool = JsonOption) -> None:
    """Delete an account: its memberships go; its runs and the audit log stay."""
    with db_session(runtime_settings()) as session:
        delete_user(session, name=name, actor=ACTOR)
    emit_line({"name": name, "deleted": True}, f"deleted {name}", as_json=as_json,
              highlight=False)  # fmt: skip


@user_app.command("sign-out-everywhere")
@handle_errors
def user_sign_out_everywhere(name: str, as_json: bool = JsonOption) -> None:
    """End every session of the user (pages and API at once, boards within ~15 s)."""
    with db_session(runtime_settings()) as session:
        end_sessions(session, name=name, actor=ACTOR)
    emit_line({"name": name, "sessions_ended": True}, f"ended every session of {name}",
              as_json=as_json, highlight=False)  # fmt: skip


@user_app.command("set-password")
@handle_errors
def user_set_password(
    name: str,
    password_stdin: bool = typer.Option(
        False, "--password-stdin", help="Read it from stdin instead of prompting."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Set or reset a local password; the user's existing sessions end."""
    if password_stdin:
        password = read_password_stdin()
    elif sys.stdin.isatty():
        password = typer.prompt("new password", hide_input=True, confirmation_prompt=True)
    else:
        raise InvalidInput("no terminal to prompt on; pipe the password in with --password-stdin")
    with db_session(runtime_settings()) as session:
        set_password(session, name=name, password=password, actor=ACTOR)
    emit_line({"name": name, "password_set": True},
              f"set the password of {name}; their sessions ended", as_json=as_json,
              highlight=False)  # fmt: skip


@project_app.command("create")
@handle_errors
def project_create(
    name: str,
    owner: str | None = typer.Option(None, "--owner", help="User who owns the project."),
    as_json: bool = JsonOption,
) -> None:
    """Create a project and its directory <storage_root>/<name>/."""
    settings = runtime_settings()
    with db_session(settings) as session:
        create_project(session, name=name, storage_root=settings.storage, owner=owner, actor=ACTOR)
    logdir = settings.storage / name
    emit_line(
        {"name": name, "owner": owner, "logdir": str(logdir)},
        f"created project {name}; write its runs under {logdir}/",
        as_json=as_json,
    )


@project_app.command("add-member")
@handle_errors
def project_add_member(
    project: str,
    user: str,
    role: str = typer.Option(..., "--role", help="viewer, editor or owner."),
    as_json: bool = JsonOption,
) -> None:
    """Give a user a role in a project (or change it)."""
    parsed = parse_role(role)
    with db_session(runtime_settings()) as session:
        set_membership(session, project=project, user=user, role=parsed, actor=ACTOR)
    emit_line(
        {"project": project, "user": user, "role": parsed.value},
        f"{user} is now {parsed.value} of {project}",
        as_json=as_json,
    )


@project_app.command("remove-member")
@handle_errors
def project_remove_member(project: str, user: str, as_json: bool = JsonOption) -> None:
    """Take a user's own role in a project away (roles through teams stay)."""
    with db_session(runtime_settings()) as session:
        remove_membership(session, project=project, user=user, actor=ACTOR)
    emit_line({"project": project, "user": user, "removed": True},
              f"{user} is no member of {project} now", as_json=as_json)  # fmt: skip


@project_app.command("delete")
@handle_errors
def project_delete(
    name: str,
    yes: bool = typer.Option(False, "--yes", help="Really delete it (nothing happens without)."),
    as_json: bool = JsonOption,
) -> None:
    """Delete a project: its runs go to the trash (restorable until purged), its members,
    board, policy, pins and share links go."""
    from tbhub.housekeeping import retention

    if not yes:
        raise InvalidInput(
            f"deleting {name} moves all its runs to the trash and removes its members, board "
            f"and share links; run `tbhub admin project delete {name} --yes` to do it"
        )
    settings = runtime_settings()
    with session_factory(settings) as factory:
        report = retention.delete_project(factory, settings, project=name, actor=ACTOR)
    result = {"project": name, "deleted": True, "trashed_runs": report.trashed,
              "bytes": report.bytes}  # fmt: skip
    emit_line(result, f"deleted {name}: {report.trashed} runs ({human_bytes(report.bytes)}) "
              "are in the trash; `tbhub admin trash list` shows them", as_json=as_json,
              highlight=False)  # fmt: skip


@project_app.command("list")
@handle_errors
def project_list(as_json: bool = JsonOption) -> None:
    """List projects with their board state."""
    with db_session(runtime_settings()) as session:
        rows = [
            {
                "name": p.name,
                "board": p.board.observed_state.value if p.board else "stopped",
                "members": len(p.memberships),
            }
            for p in list_projects(session)
        ]

    def human() -> None:
        print_table(("name", "board", "members"),
                    [(str(r["name"]), str(r["board"]), str(r["members"])) for r in rows],
                    empty=NO_PROJECTS)  # fmt: skip

    emit(rows, as_json=as_json, human=human)
