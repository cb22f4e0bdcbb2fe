"""`tbhub`: one CLI for the server, the database, nginx and operators."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

# typer parses with its own vendored copy of click; these are the errors it raises.
from typer._click import exceptions as click_errors

from tbhub import __version__
from tbhub.cli import admin
from tbhub.cli import compare as compare_cli
from tbhub.cli import runs as runs_cli
from tbhub.cli import upload as upload_cli
from tbhub.cli import user as user_cli
from tbhub.cli.common import (
    emit_line,
    fail,
    handle_errors,
    out_console,
    print_error,
    runtime_settings,
    setup_settings,
)
from tbhub.cli.serve_options import (
    DataDirOption,
    HostOption,
    PortOption,
    PublicUrlOption,
    StorageRootOption,
    settings_from_flags,
)

app = typer.Typer(
    help="tbhub: multi-user TensorBoard behind authenticated nginx.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
nginx_app = typer.Typer(help="The nginx config tbhub ships.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(nginx_app, name="nginx")
app.add_typer(admin.app, name="admin")
app.add_typer(runs_cli.app, name="runs")
app.command("login")(handle_errors(user_cli.login))
app.command("upload")(handle_errors(upload_cli.upload))
app.command("compare")(handle_errors(compare_cli.compare))
app.command("run", context_settings={"allow_interspersed_args": False}, no_args_is_help=True)(
    handle_errors(user_cli.run_command)
)


@app.callback(invoke_without_command=True)
def root(
    version: bool = typer.Option(False, "--version", help="Print tbhub's version and exit."),
    as_json: bool = typer.Option(
        False, "--json", help='With --version: print {"version": ...} as JSON.'
    ),
) -> None:
    # Options of `tbhub` itself; the help text is the Typer's above.
    if version:
        emit_line({"version": __version__}, f"tbhub {__version__}", as_json=as_json,
                  highlight=False)  # fmt: skip
        raise typer.Exit(0)
    if as_json:
        fail("--json goes after the command, e.g. `tbhub admin user list --json`; "
             "see `tbhub --help`", as_json=as_json, code="usage")  # fmt: skip


@app.command()
@handle_errors
def demo(
    host: str | None = HostOption,
    port: int | None = PortOption,
    public_url: str | None = PublicUrlOption,
    data_dir: Path | None = DataDirOption,
    storage_root: Path | None = StorageRootOption,
) -> None:
    """Set up a demo admin and project with sample runs, then serve."""
    from tbhub.cli.demo import run_demo  # heavy imports only for the commands that need them

    run_demo(settings_from_flags(host=host, port=port, public_url=public_url,
                                 data_dir=data_dir, storage_root=storage_root))  # fmt: skip


@app.command()
@handle_errors
def serve(
    no_nginx: bool = typer.Option(False, "--no-nginx", help="Run without the nginx master."),
    host: str | None = HostOption,
    port: int | None = PortOption,
    public_url: str | None = PublicUrlOption,
    data_dir: Path | None = DataDirOption,
    storage_root: Path | None = StorageRootOption,
) -> None:
    """Run the control plane, the board supervisor and nginx until SIGINT/SIGTERM."""
    from tbhub.server import serve as run_server

    settings = settings_from_flags(host=host, port=port, public_url=public_url,
                                   data_dir=data_dir, storage_root=storage_root)  # fmt: skip
    run_server(settings, with_nginx=not no_nginx)


@db_app.command("upgrade")
@handle_errors
def db_upgrade() -> None:
    """Apply every pending migration."""
    from sqlalchemy.engine import make_url

    from tbhub.db import upgrade

    settings = setup_settings()
    url = make_url(settings.db_url)
    new = url.get_backend_name() == "sqlite" and not Path(url.database or "").is_file()
    upgrade(settings.db_url)
    if new:  # said, so that one made in the wrong directory does not go unnoticed
        out_console.print(f"created a new instance: database {url.database} in the data dir "
                          f"{settings.data_dir}", highlight=False)  # fmt: skip
    out_console.print("database schema is up to date")


@nginx_app.command("render")
@handle_errors
def nginx_render() -> None:
    """Write the nginx config into <data_dir>/nginx/nginx.conf."""
    from tbhub.nginx import write_config

    path = write_config(runtime_settings())
    out_console.print(f"wrote {path}")


def own_args(args: list[str]) -> list[str]:
    """The arguments that are tbhub's: those before `--` (after it: `tbhub run`'s command)."""
    return args[: args.index("--")] if "--" in args else args


def command_path(args: list[str]) -> str:
    """`tbhub admin user list` for the command the arguments name, as far as they name one."""
    command: Any = typer.main.get_command(app)
    path = ["tbhub"]
    for arg in own_args(args):
        sub = getattr(command, "commands", {}).get(arg)
        if sub is not None:
            path.append(arg)
            command = sub
        elif not arg.startswith("-"):
            break
    return " ".join(path)


def main(argv: list[str] | None = None) -> None:
    """The `tbhub` entry point: usage errors (unknown options, bad values, missing
    arguments) in the one CLI error style too, exit 1, and the JSON shape when --json is
    anywhere among tbhub's own arguments."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in own_args(args)
    try:
        code = app(args=args, prog_name="tbhub", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        out_console.print(exc.ctx.get_help(), highlight=False, markup=False)
        code = 0
    except click_errors.UsageError as exc:
        # The parser raises some (an option missing its value) without a context.
        where = exc.ctx.command_path if exc.ctx else command_path(args)
        message = f"{exc.format_message().rstrip('.')}; see `{where} --help`"
        print_error(message, as_json=as_json, code="usage")
        code = 1
    except click_errors.ClickException as exc:
        print_error(exc.format_message(), as_json=as_json)
        code = 1
    except typer.Abort:
        print_error("aborted; nothing was changed", as_json=as_json)
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
