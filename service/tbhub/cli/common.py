"""What every command shares: settings, a database session, and one error style."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import typer
from rich.console import Console, ConsoleDimensions
from rich.table import Column, Table
from rich.text import Text

from tbhub.core.errors import ConfigError, TbhubError
from tbhub.core.timestamps import EXAMPLE, json_default
from tbhub.core.values import format_value as format_value  # the one formatter of values

if TYPE_CHECKING:  # the database and settings are imported where used: the job's commands
    # (cli/job.py, the tbhub-client package) run without the server's packages
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session, sessionmaker

    from tbhub.core.settings import Settings

P = ParamSpec("P")
R = TypeVar("R")
# Output that is not a terminal (a pipe, a file) is not wrapped: a script reads whole lines.
UNWRAPPED_WIDTH = 100_000


class OutputConsole(Console):
    """A Console whose width is the terminal's, or, when its output is no terminal and
    COLUMNS is not set, wide enough that no table is wrapped (rich would take 80, or the
    width of a terminal on another of the standard streams)."""

    def _size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        if self._width is None and not self.is_terminal and "COLUMNS" not in self._environ:
            return ConsoleDimensions(UNWRAPPED_WIDTH, size.height)
        return size

    size = property(_size, Console.size.fset)  # type: ignore[attr-defined,assignment]


err_console = OutputConsole(stderr=True, soft_wrap=True)
out_console = OutputConsole(soft_wrap=True)

JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON.")


def print_error(message: str, *, as_json: bool = False, code: str = "error") -> None:
    """The one CLI error style: `error: <what went wrong and what to do>` on stderr, or the
    API's JSON error shape on stdout with --json."""
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}))
    else:
        # Text, not markup: a message may quote "[OPTIONS]" or a path with brackets.
        err_console.print(Text.assemble(("error:", "bold red"), " ", message), highlight=False)


def fail(message: str, *, as_json: bool = False, code: str = "error") -> None:
    """Print the error in the one style and exit 1."""
    print_error(message, as_json=as_json, code=code)
    raise typer.Exit(1)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turn TbhubError into the CLI error style; never show users a traceback for them."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except TbhubError as exc:
            fail(exc.message, as_json=bool(kwargs.get("as_json")), code=exc.code)
            raise AssertionError("unreachable") from exc

    return wrapper


def runtime_settings() -> Settings:
    """The settings of the instance a command acts on, found as `tbhub serve` finds it
    (TBHUB_* variables, then tbhub.toml) and agreeing with those the server records
    (shared_settings.py). Creates nothing: with no instance there, an error says where it
    looked and what to set."""
    from tbhub.core.settings import find_instance, load_settings, prepare_runtime
    from tbhub.serve.shared_settings import agree_on_secret, agree_with_server

    settings = agree_on_secret(find_instance(agree_with_server(load_settings())))
    return prepare_runtime(settings, create=False)


def setup_settings() -> Settings:
    """The settings of `tbhub db upgrade`, which may make a new instance (data dir and
    database), as `tbhub serve` does."""
    from tbhub.core.settings import load_settings, prepare_runtime
    from tbhub.serve.shared_settings import agree_with_server

    return prepare_runtime(agree_with_server(load_settings()))


def check_schema(engine: Engine, url: str) -> None:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from tbhub.core.db import alembic_config

    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    if current != head:
        raise ConfigError(
            f"the database schema is at {current or 'nothing'} but tbhub needs {head}; "
            "run `tbhub db upgrade` first, with these same settings (it upgrades this "
            f"database, {engine.url.render_as_string(hide_password=True)})"
        )


@contextmanager
def session_factory(settings: Settings) -> Iterator[sessionmaker[Session]]:
    """Sessions on the configured database, once its schema is known to be current."""
    from tbhub.core.db import make_engine, make_session_factory

    engine = make_engine(settings.db_url)
    try:
        check_schema(engine, settings.db_url)
        yield make_session_factory(engine)
    finally:
        engine.dispose()


@contextmanager
def db_session(settings: Settings) -> Iterator[Session]:
    """One all-or-nothing transaction on the configured database. One that wrote anything
    (an account disabled or deleted, a member removed, a token revoked, sessions ended)
    also ends, once it has committed, what running servers cache of who may do what: they
    judge from the database at once, not after their caches' lifetime."""
    from tbhub.core.db import transaction
    from tbhub.serve.cache_events import forget_everywhere, note_writes

    with session_factory(settings) as factory:
        with transaction(factory) as session:
            wrote = note_writes(session)
            yield session
        if wrote:
            forget_everywhere(settings, factory)


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def time_column(header: str) -> Column:
    """A table column of iso_utc() times, each kept whole on one line."""
    return Column(header, no_wrap=True, min_width=len(EXAMPLE))


def print_table(
    columns: Sequence[str | Column], rows: Sequence[Sequence[str]], *, empty: str
) -> None:
    """The one way a list command shows rows: a table whose long cells fold onto more lines
    (a run path or a name is never cut short), or, when there are none, the `empty` line,
    which says so and what to do next, instead of an empty table."""
    if not rows:
        out_console.print(empty, highlight=False, markup=False)
        return
    table = Table(*(Column(c, overflow="fold", min_width=len(c)) if isinstance(c, str) else c
                    for c in columns))  # fmt: skip
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # text as it is: no markup in names
    out_console.print(table)


def emit(data: Any, *, as_json: bool, human: Callable[[], None]) -> None:
    if as_json:
        # One dumps then one write: much faster than json.dump's many small writes.
        sys.stdout.write(json.dumps(data, default=json_default) + "\n")
    else:
        human()


def emit_line(
    data: Any, line: str, *, as_json: bool, highlight: bool | None = None,
    markup: bool | None = None,
) -> None:  # fmt: skip
    """What most commands answer: `data` as JSON, or one line (rich's own options) for people."""
    emit(data, as_json=as_json,
         human=lambda: out_console.print(line, highlight=highlight, markup=markup))  # fmt: skip
