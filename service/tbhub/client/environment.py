"""What a job knows about itself: its global rank, its git state and how it was started."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from typing import Any

# Launchers set one of these to the process's global rank: torchrun / Lightning / accelerate,
# SLURM, Open MPI.
RANK_VARIABLES = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")


def global_rank(environ: dict[str, str] | None = None) -> int:
    """The first of RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK that is set, else 0."""
    env = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        value = env.get(name, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                continue
    return 0


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def git_lineage() -> dict[str, Any]:
    """Commit, branch and dirtiness of the working directory's repository (empty outside one)."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {}
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "git_commit": commit,
        "git_branch": branch if branch and branch != "HEAD" else None,
        "git_dirty": bool(status) if status is not None else None,
    }


def describe_launch(argv: list[str] | None = None) -> dict[str, Any]:
    """The command line (bounded) and host name, for the run's lineage."""
    command = shlex.join(sys.argv if argv is None else argv)
    return {"command": command[:8192], "host": socket.gethostname()[:255]}
