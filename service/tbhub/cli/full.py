"""`tbhub`'s whole command tree: the server, the database, nginx, operators, and the
training job's commands (cli/job.py). cli/main.py runs it."""

from __future__ import annotations

from pathlib import Path

import typer

from tbhub import __version__
from tbhub.cli import admin, alerts
from tbhub.cli.common import (
    emit_line,
    fail,
    handle_errors,
    out_console,
    runtime_settings,
    setup_settings,
)
from tbhub.cli.job import add_job_commands
from tbhub.cli.serve_options import (
    DataDirOption,
    HostOption,
    PortOption,
    PublicUrlOption,
    StorageRootOption,
    WorkersOption,
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
app.add_typer(alerts.app, name="alerts")
add_job_commands(app)


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
    workers: int | None = WorkersOption,
) -> None:
    """Run the control plane, the board supervisor and nginx until SIGINT/SIGTERM."""
    from tbhub.serve.server import serve as run_server

    settings = settings_from_flags(host=host, port=port, public_url=public_url,
                                   data_dir=data_dir, storage_root=storage_root,
                                   workers=workers)  # fmt: skip
    run_server(settings, with_nginx=not no_nginx)


@db_app.command("upgrade")
@handle_errors
def db_upgrade() -> None:
    """Apply every pending migration."""
    from sqlalchemy.engine import make_url

    from tbhub.core.db import upgrade

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
    from tbhub.serve.nginx import write_config

    path = write_config(runtime_settings())
    out_console.print(f"wrote {path}")
