"""`tbhub`: one CLI for the server, the database, nginx and operators (cli/full.py).

A training job's command (`tbhub upload`, `tbhub run`, ...) runs on the job's own tree
(cli/job.py), the one the client package ships: it imports nothing of the server, so a job
does not wait on the database drivers and the admin commands loading, on every call.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

JOB_COMMANDS = frozenset({"login", "run", "upload", "runs", "projects", "compare", "views"})


def main(argv: list[str] | None = None) -> None:
    """The `tbhub` entry point (cli/job.run_app: usage errors in the one CLI error style)."""
    args = sys.argv[1:] if argv is None else argv
    from tbhub.cli import job

    if args and args[0] in JOB_COMMANDS:
        job.run_app(job.app, args)
    else:
        from tbhub.cli.full import app

        job.run_app(app, args)


def __getattr__(name: str) -> typer.Typer:
    """`app`, the whole command tree, loaded when asked for (docs and tests read it)."""
    if name == "app":
        from tbhub.cli.full import app

        return app
    raise AttributeError(name)


if __name__ == "__main__":
    main()
