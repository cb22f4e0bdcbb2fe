"""`tbhub login` and `tbhub run -- cmd...`: the training job's side of the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import typer

from tbhub.cli.common import JsonOption, emit_line, err_console
from tbhub.cli.runs import HparamOption, ProjectOption, TagOption, parse_pairs
from tbhub.client import Client
from tbhub.client.config import save_config
from tbhub.client.environment import describe_launch, git_lineage
from tbhub.client.run import close_upload, start_uploader, writable_dir
from tbhub.core.errors import InvalidInput

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)  # fmt: skip


def login(
    url: str = typer.Option(..., "--url", help="tbhub's address, e.g. https://tbhub.example"),
    token_stdin: bool = typer.Option(False, "--token-stdin", help="Read the token from stdin."),
    as_json: bool = JsonOption,
) -> None:
    """Check a token against tbhub and save it (mode 0600) for the client and CLI."""
    if not token_stdin:
        raise InvalidInput("pass --token-stdin and pipe the token in; it is never a flag")
    token = sys.stdin.readline().strip()
    if not token:
        raise InvalidInput('no token on standard input; pipe one in: `echo "$TOKEN" | tbhub '
                           "login --url URL --token-stdin`")  # fmt: skip
    with Client(url=url, token=token) as client:
        me = client.me()  # a token that does not work is never saved
    path = save_config(client.config.url, token)
    result = {"url": client.config.url, "user": me["user"], "config": str(path),
              "projects": me["projects"]}  # fmt: skip
    emit_line(result, f"logged in to {client.config.url} as {me['user']}; saved to {path}",
              as_json=as_json)  # fmt: skip


def run_command(
    command: list[str] = typer.Argument(..., help="The command, after `--`."),
    project: str = ProjectOption,
    name: str | None = typer.Option(None, "--name", "-n", help="Default: the script's name."),
    group: str | None = typer.Option(None, "--group", help="The run's group, e.g. 'ablations/lr'."),
    hparam: list[str] = HparamOption,
    tag: list[str] = TagOption,
    upload: bool | None = typer.Option(
        None, "--upload/--no-upload", help="Default: upload only when the storage is not shared."
    ),
) -> None:
    """Register a run, run the command with TBHUB_RUN_ID and TBHUB_LOGDIR set, and mark the
    run finished, failed or killed from how it exits. Signals are passed on to it."""
    client = Client()
    hparams = parse_pairs(hparam, what="hparam")
    fields: dict[str, Any] = {**git_lineage(), **describe_launch(command)}
    fields.update(group=group, hparams=hparams, tags=tag)
    run = client.create_run(project, name or default_name(command), **fields)
    logdir, uploader = str(run["logdir"]), None
    if upload is True or (upload is None and not writable_dir(logdir)):
        logdir = tempfile.mkdtemp(prefix=f"tbhub-run-{run['id']}-")
        uploader = start_uploader(client, str(run["upload_url"]), Path(logdir))
    err_console.print(f"tbhub: run {run['id']} of {project} writes to {logdir}", highlight=False)
    env = {**os.environ, "TBHUB_RUN_ID": str(run["id"]), "TBHUB_LOGDIR": logdir,
           "TBHUB_PROJECT": project}  # fmt: skip
    returncode, signalled = supervise(command, env)
    status = (
        "killed" if signalled or returncode < 0 else "finished" if returncode == 0 else "failed"
    )
    try:
        sent = uploader is None or close_upload(
            uploader, Path(logdir), owned=True, project=project, run_id=int(run["id"])
        )
        if not sent and status == "finished":
            status, returncode = "failed", 1  # the job ran, but its logs are not all there
        client.update_run(project, int(run["id"]), status=status)
    finally:
        client.close()
    err_console.print(f"tbhub: run {run['id']} {status}", highlight=False)
    raise typer.Exit(returncode if returncode >= 0 else 128 - returncode)


def default_name(command: list[str]) -> str:
    """'python train.py --lr 1' -> 'train'; '/usr/bin/make' -> 'make'."""
    words = [w for w in command if not w.startswith("-")]
    script = next((w for w in words[1:] if w.endswith(".py")), words[0] if words else "run")
    return safe_run_name(Path(script).stem)


def safe_run_name(text: str) -> str:
    """A run name the API accepts, made from a script or directory name."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in text)
    return name.strip("-._")[:100] or "run"


def supervise(command: list[str], env: dict[str, str]) -> tuple[int, bool]:
    """Run `command` in its own process group and pass our signals on to it, so one Ctrl-C
    reaches it once. Returns its exit code (negative: killed by that signal) and whether
    a stopping signal (INT, TERM, HUP) came to us."""
    try:
        child = subprocess.Popen(command, env=env, process_group=0)
    except OSError as exc:
        raise InvalidInput(f"cannot start {command[0]!r}: {exc.strerror}; check the command "
                           "after `--`") from None  # fmt: skip
    signalled = False

    def forward(signum: int, _frame: FrameType | None) -> None:
        nonlocal signalled
        signalled = signalled or signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        returncode = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return returncode, signalled
