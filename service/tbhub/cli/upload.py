"""`tbhub upload PATH --project P [--run R] [--watch] [--finish]`: a local log directory
into a run.

Without --run, the first upload of a directory registers a run named after it and remembers
the run (in uploads.json beside the login file), so running the same command again after an
interruption resumes that run instead of starting another. --hparam and --tag go into the
run (merged into one that exists); --finish marks it finished once everything is sent, and
failed when the upload fails (an interruption leaves it running, to be resumed).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

from tbhub.cli.common import JsonOption, emit_line, err_console, human_bytes
from tbhub.cli.runs import HparamOption, ProjectOption, TagOption, parse_pairs
from tbhub.cli.user import safe_run_name
from tbhub.client import Client
from tbhub.client.config import config_path
from tbhub.client.upload import Uploader
from tbhub.core.errors import InvalidInput, TbhubError


def upload(
    path: Path = typer.Argument(..., help="The local log directory to upload."),
    project: str = ProjectOption,
    run: int | None = typer.Option(
        None,
        "--run",
        "-r",
        min=1,
        help="Upload into this run (default: the run this directory "
        "went to before, else a new one named after it).",
    ),
    name: str | None = typer.Option(None, "--name", "-n", help="Name of a new run."),
    watch: bool = typer.Option(
        False, "--watch", help="Keep sending new data until interrupted (Ctrl-C)."
    ),
    interval: float = typer.Option(2.0, "--interval", min=0.1, max=3600, help="--watch period."),
    hparam: list[str] = HparamOption,
    tag: list[str] = TagOption,
    finish: bool = typer.Option(
        False,
        "--finish",
        help="Mark the run finished once everything is uploaded (failed if the upload fails).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Upload event files (and the rest of the directory) into a run; safe to repeat: only
    what the server does not hold yet is sent."""
    if not path.is_dir():
        raise InvalidInput(f"{path} is not a directory; give the run's local log directory")
    local = path.resolve()
    hparams = parse_pairs(hparam, what="hparam")
    with Client() as client:
        run_id = run or remembered_run(client.config.url, project, local)
        if run_id is None:
            created = client.create_run(project, name or safe_run_name(local.name),
                                        hparams=hparams, tags=tag)  # fmt: skip
            run_id = int(created["id"])
            remember_run(client.config.url, project, local, run_id)
            err_console.print(f"registered run {run_id} in {project}", highlight=False)
            info = created
        else:
            info = describe_run(client, project, run_id, hparams, tag)
        try:
            report = send(client, str(info["upload_url"]), local, watch, interval, quiet=as_json)
        except KeyboardInterrupt:
            raise Interrupted(
                f"upload into run {run_id} interrupted; run the same command again to send "
                "the rest (only what the server lacks is sent)"
            ) from None
        except (TbhubError, OSError):
            if finish:
                client.update_run(project, run_id, status="failed")
                err_console.print(f"run {run_id} marked failed", highlight=False)
            raise
        if finish:
            info = client.update_run(project, run_id, status="finished")
    result = {"project": project, "run": run_id, "status": info["status"],
              "files": report.files, "bytes_sent": report.bytes_sent,
              "skipped": report.skipped}  # fmt: skip
    skipped = (f"; skipped {len(report.skipped)} path(s) the server would refuse"
               if report.skipped else "")  # fmt: skip
    emit_line(result, f"run {run_id} of {project}: sent {human_bytes(report.bytes_sent)} in "
              f"{report.files} file(s){skipped}; {info['status']}", as_json=as_json)  # fmt: skip


class Interrupted(TbhubError):
    code = "interrupted"


def describe_run(client: Client, project: str, run_id: int, hparams: dict[str, Any],
                 tags: list[str]) -> dict[str, Any]:  # fmt: skip
    """The run an upload goes into, with these hyperparameters merged in and tags added."""
    info = client.get_run(project, run_id)
    if not hparams and not tags:
        return info
    added = list(dict.fromkeys([*info.get("tags", []), *tags]))
    return client.update_run(project, run_id, hparams=hparams or None,
                             tags=added if tags else None)  # fmt: skip


def send(client: Client, upload_url: str, local: Path, watch: bool, interval: float,
         *, quiet: bool) -> Any:  # fmt: skip
    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), console=err_console, disable=quiet, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task("uploading", total=None)

        def show(sent: int, total: int) -> None:
            progress.update(task, completed=sent, total=total)

        uploader = Uploader(client.http, upload_url, local, on_progress=show)
        if watch:
            err_console.print("following new data; Ctrl-C to stop", highlight=False)
            return uploader.watch(interval, threading.Event())
        uploader.sync(final=True)
        return uploader.total


def _state_file() -> Path:
    return config_path().parent / "uploads.json"


def _key(url: str, project: str, local: Path) -> str:
    return f"{url}|{project}|{local}"


def remembered_run(url: str, project: str, local: Path) -> int | None:
    try:
        known = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return None
    value = known.get(_key(url, project, local)) if isinstance(known, dict) else None
    return value if isinstance(value, int) else None


def remember_run(url: str, project: str, local: Path, run_id: int) -> None:
    path = _state_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    known[_key(url, project, local)] = run_id
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(known, fh)
    os.replace(tmp, path)
