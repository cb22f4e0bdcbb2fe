"""`tbhub admin board ...`: board state, memory and restarts; restart, stop, pin and settings.

Every command only writes desired state; the supervisor of `tbhub serve` acts on its next
pass (within TBHUB_RECONCILE_INTERVAL seconds).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer
from pydantic import ByteSize, TypeAdapter, ValidationError

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    emit_line,
    format_value,
    handle_errors,
    human_bytes,
    out_console,
    print_table,
    runtime_settings,
    time_column,
)
from tbhub.core.errors import InvalidInput
from tbhub.domain.dashboards import SUGGESTED
from tbhub.domain.projects import get_project
from tbhub.supervisor.board_settings import (
    UNSET,
    SettingsChange,
    describe_board,
    describe_boards,
    request_restart,
    request_stop,
    toggleable_plugins,
    update_settings,
)

app = typer.Typer(
    help="Boards: state, memory, restarts; restart, stop, pin and per-project settings.",
    no_args_is_help=True,
)
ACTOR = "cli"


def _now() -> datetime:
    return datetime.now(UTC)


def _restarts(counts: dict[str, int]) -> str:
    return format_value(dict(sorted(counts.items())))


def _bytes(value: int | None) -> str:
    return human_bytes(value) if value else "-"


@app.command("list")
@handle_errors
def board_list(as_json: bool = JsonOption) -> None:
    """Every board (each project's, then compare boards): state, PSS against its limit,
    restarts by reason, last access."""
    settings = runtime_settings()
    with db_session(settings) as session:
        rows = describe_boards(session, settings)

    def human() -> None:
        print_table(
            ("board", "kind", "desired", "observed", "PSS", "limit", "restarts",
             time_column("last access"), "note"),
            [(row["project"], row["kind"], row["desired"], row["observed"],
              _bytes(row["pss_bytes"]), _bytes(row["memory_limit"]), _restarts(row["restarts"]),
              row["last_access_at"] or "-", row["status_note"] or "") for row in rows],
            empty="no boards yet: each project has one; create a project with "
                  "`tbhub admin project create NAME`",
        )  # fmt: skip

    emit(rows, as_json=as_json, human=human)


@app.command("status")
@handle_errors
def board_status(project: str, as_json: bool = JsonOption) -> None:
    """Show one board, with the last lines it printed if it failed."""
    settings = runtime_settings()
    with db_session(settings) as session:
        row = describe_board(session, get_project(session, name=project), settings)

    def human() -> None:
        for key, value in row.items():
            if key in ("last_error", "settings", "restarts"):
                continue
            if key in ("pss_bytes", "memory_limit"):
                value = _bytes(value)
            out_console.print(f"{key}: {format_value(value)}", markup=False)
        out_console.print(f"restarts: {_restarts(row['restarts'])}", markup=False)
        out_console.print(f"settings: {format_value(row['settings'])}", markup=False)
        if row["last_error"]:
            out_console.print("last error:")
            out_console.print(row["last_error"], markup=False, highlight=False)

    emit(row, as_json=as_json, human=human)


@app.command("restart")
@handle_errors
def board_restart(project: str, as_json: bool = JsonOption) -> None:
    """Replace the board blue/green (readers notice nothing); start it if it is stopped."""
    with db_session(runtime_settings()) as session:
        request_restart(session, project=project, actor=ACTOR, now=_now())
    result = {"project": project, "restart": "requested"}
    emit_line(result, f"restart of {project}'s board requested", as_json=as_json)


@app.command("stop")
@handle_errors
def board_stop(project: str, as_json: bool = JsonOption) -> None:
    """Stop the board until someone opens it again."""
    with db_session(runtime_settings()) as session:
        request_stop(session, project=project, actor=ACTOR, now=_now())
    emit_line({"project": project, "desired": "stopped"}, f"{project}'s board will stop",
              as_json=as_json)  # fmt: skip


def _set(project: str, change: SettingsChange, as_json: bool) -> None:
    settings = runtime_settings()
    with db_session(settings) as session:
        result = update_settings(session, project=project, change=change, actor=ACTOR,
                                 now=_now(), backend=settings.board_backend,
                                 toggleable=toggleable_plugins(settings))  # fmt: skip
    emit_line({"project": project, "settings": result}, f"{project}: {format_value(result)}",
              as_json=as_json, markup=False)  # fmt: skip


@app.command("pin")
@handle_errors
def board_pin(project: str, as_json: bool = JsonOption) -> None:
    """Never stop this board for idleness and never evict it for the memory budget."""
    _set(project, SettingsChange(pinned=True), as_json)


@app.command("unpin")
@handle_errors
def board_unpin(project: str, as_json: bool = JsonOption) -> None:
    """Let the board stop when idle and be evicted again."""
    _set(project, SettingsChange(pinned=False), as_json)


def parse_memory_limit(value: str) -> int | None:
    """'2GiB', '500MB', '0' (no limit) or 'default' (inherit TBHUB_BOARD_MEMORY_LIMIT)."""
    if value == "default":
        return None
    try:
        return int(TypeAdapter(ByteSize).validate_python(value))
    except ValidationError:
        raise InvalidInput(
            f"memory limit {value[:40]!r} is not a size; use e.g. 2GiB, 500MB, 0 (no limit) "
            "or default"
        ) from None


@app.command("set")
@handle_errors
def board_set(
    project: str,
    reload_interval: int | None = typer.Option(
        None, help="Seconds between TensorBoard's reloads (1-86400)."
    ),
    samples_per_plugin: str | None = typer.Option(
        None, help="TensorBoard's --samples_per_plugin, e.g. scalars=500,images=0."
    ),
    memory_limit: str | None = typer.Option(
        None, help="PSS limit, e.g. 2GiB; 0: no limit; default: the global limit."
    ),
    plugin: list[str] = typer.Option(
        None,
        "--plugin",
        help="Turn on an off-by-default plugin (projector, or an extra plugin the operator "
        "installed: tbhub admin plugins list); repeat for more.",
    ),
    no_plugins: bool = typer.Option(False, "--no-plugins", help="Back to the default plugins."),
    restrict: list[str] = typer.Option(
        None,
        "--restrict",
        help="Keep a dashboard (TensorBoard plugin name, e.g. histograms) from the audience; "
        "repeat for more. Replaces the restricted set.",
    ),
    restrict_suggested: bool = typer.Option(
        False, "--restrict-suggested", help=f"Restrict the suggested set: {', '.join(SUGGESTED)}."
    ),
    no_restrict: bool = typer.Option(
        False, "--no-restrict", help="Lift the restriction: every reader sees every dashboard."
    ),
    restrict_audience: str | None = typer.Option(
        None, "--restrict-audience", help="Who is kept from them: viewers, share_links or both."
    ),
    inherit: list[str] = typer.Option(
        None,
        "--inherit",
        help="Go back to the default for this field (reload_interval, "
        "samples_per_plugin, memory_limit); repeat for more.",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Change the project's board settings. A change to the process (reload interval, samples,
    plugins) restarts the board blue/green; a memory limit and restricted dashboards apply
    as they are."""
    fields: dict[str, Any] = {}
    if reload_interval is not None:
        fields["reload_interval"] = reload_interval
    if samples_per_plugin is not None:
        fields["samples_per_plugin"] = samples_per_plugin
    if memory_limit is not None:
        fields["memory_limit"] = parse_memory_limit(memory_limit)
    if plugin or no_plugins:
        fields["plugins"] = [] if no_plugins else list(plugin)
    if sum((bool(restrict), restrict_suggested, no_restrict)) > 1:
        raise InvalidInput("give one of --restrict, --restrict-suggested or --no-restrict")
    if restrict or restrict_suggested or no_restrict:
        chosen = list(SUGGESTED) if restrict_suggested else list(restrict or [])
        fields["restricted_dashboards"] = chosen
    if restrict_audience is not None:
        fields["restricted_audience"] = restrict_audience
    for name in inherit or []:
        if name not in ("reload_interval", "samples_per_plugin", "memory_limit"):
            raise InvalidInput(
                f"--inherit {name!r}: only reload_interval, samples_per_plugin or memory_limit"
            )
        fields[name] = None
    if not fields:
        raise InvalidInput("nothing to change; see `tbhub admin board set --help`")
    change = SettingsChange(**{**dict.fromkeys(SettingsChange.__dataclass_fields__, UNSET),
                               **fields})  # fmt: skip
    _set(project, change, as_json)
