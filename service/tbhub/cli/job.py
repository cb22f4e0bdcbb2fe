"""The commands a training job needs (login, run, upload, runs, projects, compare, views),
and the one way `tbhub` runs a Typer app. They import nothing of the server, so the
tbhub-client package (client_dist.py: `pip install` from tbhub's /pip/) runs them as its
`tbhub`; the full CLI (cli/main.py) adds the same commands to its own."""

from __future__ import annotations

import sys
from typing import Any

import typer

# typer parses with its own vendored copy of click; these are the errors it raises.
from typer._click import exceptions as click_errors

from tbhub import __version__
from tbhub.cli import compare as compare_cli
from tbhub.cli import projects as projects_cli
from tbhub.cli import runs as runs_cli
from tbhub.cli import upload as upload_cli
from tbhub.cli import user as user_cli
from tbhub.cli import views as views_cli
from tbhub.cli.common import emit_line, handle_errors, out_console, print_error


def add_job_commands(app: typer.Typer) -> None:
    app.add_typer(runs_cli.app, name="runs")
    app.add_typer(projects_cli.app, name="projects")
    app.add_typer(views_cli.app, name="views")
    app.command("login")(handle_errors(user_cli.login))
    app.command("upload")(handle_errors(upload_cli.upload))
    app.command("compare")(handle_errors(compare_cli.compare))
    app.command("run", context_settings={"allow_interspersed_args": False},
                no_args_is_help=True)(handle_errors(user_cli.run_command))  # fmt: skip


def own_args(args: list[str]) -> list[str]:
    """The arguments that are tbhub's: those before `--` (after it: `tbhub run`'s command)."""
    return args[: args.index("--")] if "--" in args else args


def command_path(app: typer.Typer, args: list[str]) -> str:
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


def run_app(app: typer.Typer, argv: list[str] | None = None) -> None:
    """A `tbhub` entry point: usage errors (unknown options, bad values, missing arguments)
    in the one CLI error style too, exit 1, and the JSON shape when --json is anywhere among
    tbhub's own arguments."""
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in own_args(args)
    try:
        code = app(args=args, prog_name="tbhub", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        out_console.print(exc.ctx.get_help(), highlight=False, markup=False)
        code = 0
    except click_errors.UsageError as exc:
        # The parser raises some (an option missing its value) without a context.
        where = exc.ctx.command_path if exc.ctx else command_path(app, args)
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


app = typer.Typer(
    help="tbhub's training-job commands (the tbhub-client package).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
add_job_commands(app)


@app.callback(invoke_without_command=True)
def root(
    version: bool = typer.Option(False, "--version", help="Print the client's version."),
) -> None:
    if version:
        emit_line({"version": __version__}, f"tbhub-client {__version__}", as_json=False,
                  highlight=False)  # fmt: skip
        raise typer.Exit(0)


def main(argv: list[str] | None = None) -> None:
    run_app(app, argv)


if __name__ == "__main__":
    main()
