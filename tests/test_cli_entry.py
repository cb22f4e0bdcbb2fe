"""`tbhub`'s entry point: a training job's command runs without the server's modules (the
database drivers, the admin tree), which cost a job a second or more of CPU on every call;
anything else gets the whole tree."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tbhub.cli.main import JOB_COMMANDS

PROBE = """
import sys
from tbhub.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(code, "sqlalchemy" in sys.modules, "tbhub.cli.admin" in sys.modules)
"""


def loaded(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                          check=True, timeout=120)  # fmt: skip
    return done.stdout.split()[-3:]


@pytest.mark.parametrize("command", sorted(JOB_COMMANDS))
def test_a_job_command_loads_nothing_of_the_server(command: str) -> None:
    assert loaded(command, "--help") == ["0", "False", "False"]


def test_every_other_command_gets_the_whole_tree() -> None:
    assert loaded("db", "--help") == ["0", "True", "True"]


def test_the_commands_sent_to_the_job_tree_are_the_job_trees_own() -> None:
    import typer

    from tbhub.cli import job

    assert set(typer.main.get_command(job.app).commands) == JOB_COMMANDS  # type: ignore[attr-defined]
