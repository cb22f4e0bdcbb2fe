"""`tbhub admin backup ...`: rsync snapshots, listed, verified and restored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tbhub.cli.common import (
    JsonOption,
    emit,
    emit_line,
    err_console,
    fail,
    handle_errors,
    human_bytes,
    out_console,
    print_table,
    runtime_settings,
    session_factory,
)
from tbhub.core.errors import TbhubError
from tbhub.housekeeping import backup

app = typer.Typer(help="Backups: rsync snapshots with --link-dest.", no_args_is_help=True)
ACTOR = "cli"


@app.command("run")
@handle_errors
def run_command(as_json: bool = JsonOption) -> None:
    """Take a snapshot now (resuming an interrupted one), then prune old snapshots."""
    settings = runtime_settings()

    def retrying(attempt: int, exc: TbhubError) -> None:
        if not as_json:
            err_console.print(
                f"attempt {attempt} failed ({exc.message}); retrying", highlight=False
            )

    with session_factory(settings) as factory:
        report = backup.run_backup(factory, settings, actor=ACTOR, on_retry=retrying)
    pruned = f"; pruned {', '.join(report.pruned)}" if report.pruned else ""
    emit_line(report.as_dict(),
              f"snapshot {report.snapshot} complete{' (resumed)' if report.resumed else ''}: "
              f"{report.files} files written, {human_bytes(report.transferred_bytes)} of "
              f"{human_bytes(report.bytes)} transferred{pruned}", as_json=as_json)  # fmt: skip


@app.command("list")
@handle_errors
def list_command(as_json: bool = JsonOption) -> None:
    """Snapshots on the target: complete ones, and a partial one an interrupted run left."""
    settings = runtime_settings()
    rows = backup.list_snapshots(settings)
    with session_factory(settings) as factory, factory() as session:
        last_run = backup.run_summary(backup.last_runs(session)[0])

    def human() -> None:
        print_table(("snapshot", "state"), [(r["name"], r["state"]) for r in rows],
                    empty=f"no snapshots on {settings.backup_target} yet; take one with "
                          "`tbhub admin backup run`")  # fmt: skip
        out_console.print(last_run_line(last_run), highlight=False, markup=False)

    emit({"snapshots": rows, "last_run": last_run}, as_json=as_json, human=human)


def last_run_line(run: dict[str, Any] | None) -> str:
    """How the last backup run ended, as `backup list` (and the backup docs) promise."""
    if run is None:
        return "last run: none yet; take one with `tbhub admin backup run`"
    when = f"to {run['target']}, finished {run['finished_at']} by {run['actor']}"
    if run["state"] == "failed":
        return f"last run: failed, {when}: {run['error']}"
    return (f"last run: complete, {when}: snapshot {run['snapshot']}, {run['files']} files "
            f"written, {human_bytes(run['transferred_bytes'] or 0)} of "
            f"{human_bytes(run['bytes'] or 0)} transferred")  # fmt: skip


@app.command("verify")
@handle_errors
def verify_command(
    snapshot: str | None = typer.Argument(None, help="Snapshot name (default: the newest)."),
    as_json: bool = JsonOption,
) -> None:
    """Checksum every file of a snapshot against its manifest; list every difference."""
    settings = runtime_settings()
    with session_factory(settings) as factory:
        name, problems = backup.verify(factory, settings, snapshot=snapshot, actor=ACTOR)
    if as_json:
        emit({"snapshot": name, "ok": not problems, "problems": problems}, as_json=True,
             human=lambda: None)  # fmt: skip
        if problems:
            raise typer.Exit(1)
        return
    for problem in problems:
        out_console.print(f"{problem['problem']}: {problem['path']}", highlight=False)
    if problems:
        fail(
            f"snapshot {name} has {len(problems)} file(s) that differ from its manifest (listed "
            "above); restore from another snapshot and take a new one"
        )
    out_console.print(f"snapshot {name} matches its manifest")


@app.command("restore")
@handle_errors
def restore_command(
    snapshot: str | None = typer.Option(None, "--snapshot", help="Default: the newest."),
    project: str | None = typer.Option(None, "--project", "-p", help="Only this project."),
    run: str | None = typer.Option(None, "--run", help="Only this run (needs --project)."),
    into: Path | None = typer.Option(None, "--into", help="Restore here, not the storage root."),
    force: bool = typer.Option(False, "--force", help="Overwrite files that are newer here."),
    as_json: bool = JsonOption,
) -> None:
    """Bring back one run, one project or everything from a snapshot."""
    settings = runtime_settings()
    with session_factory(settings) as factory:
        report = backup.restore(factory, settings, snapshot=snapshot, project=project, run=run,
                                into=into, force=force, actor=ACTOR)  # fmt: skip

    def human() -> None:
        out_console.print(
            f"restored {len(report.restored)} files from {report.snapshot} into "
            f"{report.destination}",
            highlight=False,
        )
        if report.kept_newer:
            out_console.print(
                f"kept {len(report.kept_newer)} newer files there (--force overwrites them): "
                + ", ".join(report.kept_newer[:10]),
                highlight=False,
            )

    emit(report.as_dict(), as_json=as_json, human=human)
