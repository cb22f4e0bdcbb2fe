"""`tbhub runs create|list|show|finish|download`: the run registry from a shell, over the
API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from tbhub.cli.common import (
    JsonOption,
    emit,
    emit_line,
    err_console,
    format_value,
    handle_errors,
    human_bytes,
    out_console,
    print_table,
    time_column,
)
from tbhub.client import Client
from tbhub.client.download import download_file
from tbhub.core.errors import InvalidInput

app = typer.Typer(help="Runs of a project, over the API (needs `tbhub login`).",
                  no_args_is_help=True)  # fmt: skip
ProjectOption = typer.Option(..., "--project", "-p", envvar="TBHUB_PROJECT",
                             help="The project.")  # fmt: skip
FINAL_STATES = ("finished", "failed", "killed")
# What `runs create`, `tbhub run` and `tbhub upload` share about a new run (parse_pairs
# reads the hparams).
HparamOption = typer.Option([], "--hparam", help="KEY=VALUE (repeat); JSON values parse.")
TagOption = typer.Option([], "--tag", help="A tag (repeat).")
# What `runs show` prints under the run's first line, when the run has it.
DETAILS = ("logdir", "hparams", "metrics", "tags", "git_commit", "notes", "retention_state")


def parse_pairs(pairs: list[str], *, what: str) -> dict[str, Any]:
    """['lr=0.1', 'opt=adam'] -> {'lr': 0.1, 'opt': 'adam'}: JSON values where they parse."""
    result: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{what} {pair!r} is not KEY=VALUE, e.g. --{what} lr=0.1")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        result[key] = value if isinstance(value, str | int | float | bool) else raw
    return result


def print_run(run: dict[str, Any]) -> None:
    out_console.print(f"run {run['id']} of {run['project']}: {run['path']} ({run['status']})",
                      highlight=False, markup=False)  # fmt: skip
    width = max(map(len, DETAILS)) + 2  # every label, the longest too, then two spaces
    for key in DETAILS:
        if run.get(key):
            out_console.print(f"  {key:{width}}{format_value(run[key])}", highlight=False,
                              markup=False)  # fmt: skip


@app.command("create")
@handle_errors
def create(
    project: str = ProjectOption,
    name: str = typer.Option(..., "--name", "-n", help="The run's name."),
    group: str | None = typer.Option(None, "--group", help="e.g. 'ablations/lr'."),
    hparam: list[str] = HparamOption,
    tag: list[str] = TagOption,
    notes: str | None = typer.Option(None, "--notes", help="Free text about the run."),
    as_json: bool = JsonOption,
) -> None:
    """Register a run and print its id and logdir."""
    hparams = parse_pairs(hparam, what="hparam")
    with Client() as client:
        run = client.create_run(project, name, group=group, hparams=hparams, tags=tag,
                                notes=notes)  # fmt: skip
    emit(run, as_json=as_json, human=lambda: print_run(run))


@app.command("list")
@handle_errors
def list_(
    project: str = ProjectOption,
    status: str | None = typer.Option(None, "--status", help="running, finished, ..."),
    tag: str | None = typer.Option(None, "--tag", help="Only runs with this tag."),
    group: str | None = typer.Option(None, "--group", help="Only runs in this group."),
    query: str | None = typer.Option(None, "--query", "-q", help="Text in path or notes."),
    limit: int = typer.Option(50, "--limit", min=1, max=500, help="At most this many runs."),
    as_json: bool = JsonOption,
) -> None:
    """List runs, newest first."""
    with Client() as client:
        page = client.list_runs(project, status=status, tag=tag, group=group, q=query,
                                limit=limit)  # fmt: skip
    runs = page["runs"]

    def human() -> None:
        filtered = any(f is not None for f in (status, tag, group, query))
        print_table(
            ("id", "path", "status", time_column("created"), "by"),
            [(str(r["id"]), r["path"], r["status"], r["created_at"], r["created_by"])
             for r in runs],
            empty=f"no runs of {project} match; try fewer filters" if filtered else
            f"no runs in {project} yet; start one with `tbhub run --project {project} -- "
            "python train.py`",
        )  # fmt: skip

    emit(runs, as_json=as_json, human=human)


@app.command("show")
@handle_errors
def show(run_id: int, project: str = ProjectOption, as_json: bool = JsonOption) -> None:
    """One run, with its logdir, lineage and metrics."""
    with Client() as client:
        run = client.get_run(project, run_id)
    emit(run, as_json=as_json, human=lambda: print_run(run))


@app.command("finish")
@handle_errors
def finish(
    run_id: int,
    project: str = ProjectOption,
    status: str = typer.Option("finished", "--status", help="finished, failed or killed."),
    metric: list[str] = typer.Option([], "--metric", help="KEY=NUMBER summary metric (repeat)."),
    as_json: bool = JsonOption,
) -> None:
    """Mark how a run ended, with its summary metrics."""
    if status not in FINAL_STATES:
        raise InvalidInput(f"--status {status!r} is not one of: {', '.join(FINAL_STATES)}")
    metrics = parse_pairs(metric, what="metric") or None
    with Client() as client:
        run = client.update_run(project, run_id, status=status, metrics=metrics)
    emit(run, as_json=as_json, human=lambda: print_run(run))


@app.command("download")
@handle_errors
def download(
    run_id: int,
    path: str = typer.Argument(..., help="The file's path inside the run, e.g. ckpt/model.pt."),
    project: str = ProjectOption,
    out: Path | None = typer.Option(
        None, "--output", "-o", help="Where to write it (default: its name, here)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Download one file of a run; run it again to resume one that was cut off."""
    target = out if out is not None else Path(path.rsplit("/", 1)[-1])
    bar = Progress("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                   console=err_console, transient=True,
                   disable=as_json or not err_console.is_terminal)  # fmt: skip
    with Client() as client, bar:
        task = bar.add_task(path, total=None)
        done = download_file(client, project, run_id, path, target,
                             progress=lambda held, total: bar.update(task, completed=held,
                                                                     total=total))  # fmt: skip
    resumed = f", resumed at byte {done.resumed_from}" if done.resumed_from else ""
    emit_line(done.as_json(), f"wrote {done.path} ({human_bytes(done.bytes)}{resumed}); "
              f"sha256 {done.sha256}", as_json=as_json, highlight=False,
              markup=False)  # fmt: skip
