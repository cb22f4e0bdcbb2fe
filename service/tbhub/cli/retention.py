"""`tbhub admin retention ...` and `tbhub admin trash ...`: plan, apply, undo."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

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
    time_column,
)
from tbhub.core.db import transaction
from tbhub.core.timestamps import iso_utc
from tbhub.domain.retention_policy import ProjectPlan
from tbhub.housekeeping import retention, trash

app = typer.Typer(help="Retention: what to remove by age, count and size.", no_args_is_help=True)
trash_app = typer.Typer(
    help="Runs removed by retention: list, restore, purge.", no_args_is_help=True
)

ACTOR = "cli"
ProjectOption = typer.Option(None, "--project", "-p", help="Only this project.")
SHOWN_RUNS = 10


def print_plans(plans: list[ProjectPlan], *, show_runs: int = SHOWN_RUNS) -> None:
    print_table(
        ("project", "action", "remove", "bytes", "keep", "kept bytes", "pinned", "active"),
        [(plan.project, plan.policy.action, str(len(plan.remove)),
          human_bytes(plan.remove_bytes), str(plan.kept_runs), human_bytes(plan.kept_bytes),
          str(plan.skipped_pinned), str(plan.skipped_active)) for plan in plans],
        empty="no projects yet, so nothing to plan; create one with "
              "`tbhub admin project create NAME`",
    )  # fmt: skip
    for plan in plans:
        for decision in plan.remove[:show_runs]:
            run = decision.run
            out_console.print(
                f"  {plan.policy.action} {plan.project}/{run.path}  {human_bytes(run.bytes)}  "
                f"last write {iso_utc(run.last_write)}  ({', '.join(decision.reasons)})",
                highlight=False,
            )
        if len(plan.remove) > show_runs:
            out_console.print(
                f"  ... and {len(plan.remove) - show_runs} more in {plan.project} "
                "(--json lists all)"
            )


def plans_json(plans: list[ProjectPlan]) -> dict[str, Any]:
    return {
        "projects": [p.summary() for p in plans],
        "remove_runs": sum(len(p.remove) for p in plans),
        "remove_bytes": sum(p.remove_bytes for p in plans),
    }


@app.command("plan")
@handle_errors
def plan_command(project: str | None = ProjectOption, as_json: bool = JsonOption) -> None:
    """Dry run: list what apply would remove, with run counts and bytes per project."""
    settings = runtime_settings()
    with session_factory(settings) as factory:
        plans = retention.plan_retention(factory, settings, project=project)
    if as_json:  # json.dumps runs in C; emit's json.dump to a stream is ~10x slower here
        print(json.dumps(plans_json(plans)))
    else:
        print_plans(plans)


@app.command("apply")
@handle_errors
def apply_command(
    project: str | None = ProjectOption,
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    as_json: bool = JsonOption,
) -> None:
    """Move (or archive) the runs the plan lists; trashed runs can be restored."""
    settings = runtime_settings()
    with session_factory(settings) as factory:
        plans = retention.plan_retention(factory, settings, project=project)
        runs = sum(len(p.remove) for p in plans)
        total = sum(p.remove_bytes for p in plans)
        if not as_json:
            print_plans(plans)
        if runs and not yes and not typer.confirm(f"remove {runs} runs ({human_bytes(total)})?"):
            fail("nothing done; pass --yes to apply without asking")
        with Progress(
            TextColumn("applying retention"),
            BarColumn(),
            DownloadColumn(),
            TimeRemainingColumn(),
            console=err_console,
            disable=as_json or runs == 0,
        ) as progress:
            task = progress.add_task("apply", total=total or 1)
            report = retention.apply_plans(
                factory,
                settings,
                plans,
                actor=ACTOR,
                on_progress=lambda size: progress.advance(task, size),
            )

    def human() -> None:
        out_console.print(
            f"trashed {report.trashed} and archived {report.archived} runs "
            f"({human_bytes(report.bytes)}); `tbhub admin trash list` shows what can be restored"
        )
        if report.recovered:
            out_console.print(f"finished {report.recovered} step(s) an earlier run left half-done")
        for skipped in report.skipped:
            out_console.print(f"  skipped {skipped['run']}: {skipped['why']}", highlight=False)

    emit(report.as_dict(), as_json=as_json, human=human)


@app.command("show")
@handle_errors
def show_command(project: str, as_json: bool = JsonOption) -> None:
    """A project's effective policy, its overrides and its pinned runs."""
    settings = runtime_settings()
    with session_factory(settings) as factory, transaction(factory) as session:
        data = retention.describe_policy(session, settings, project=project)
    emit(data, as_json=as_json, human=lambda: out_console.print_json(data=data))


@app.command("set")
@handle_errors
def set_command(
    project: str,
    max_age_days: float | None = typer.Option(None, help="Days since last write; 0 = no limit."),
    keep_last: int | None = typer.Option(None, help="Keep the newest N runs; 0 = no limit."),
    max_project_bytes: int | None = typer.Option(None, help="Quota in bytes; 0 = no quota."),
    action: str | None = typer.Option(None, help="trash or archive."),
    active_minutes: float | None = typer.Option(None, help="Minutes a run counts as active."),
    inherit: list[str] = typer.Option(
        [], "--inherit", help="Go back to the global default for this setting (repeatable)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Override the global retention default for one project."""
    values: dict[str, Any] = {
        k: v
        for k, v in {
            "max_age_days": max_age_days,
            "keep_last": keep_last,
            "max_project_bytes": max_project_bytes,
            "action": action,
            "active_minutes": active_minutes,
        }.items()
        if v is not None
    }
    values.update({name.replace("-", "_"): None for name in inherit})
    settings = runtime_settings()
    with session_factory(settings) as factory, transaction(factory) as session:
        result = retention.set_override(session, project=project, values=values, actor=ACTOR)
    emit(result, as_json=as_json, human=lambda: out_console.print_json(data=result))


@app.command("pin")
@handle_errors
def pin_command(project: str, run: str, as_json: bool = JsonOption) -> None:
    """Exempt a run (its path inside the project) from retention."""
    settings = runtime_settings()
    with session_factory(settings) as factory, transaction(factory) as session:
        retention.pin_run(session, settings, project=project, run_path=run, actor=ACTOR)
    emit_line({"project": project, "run": run, "pinned": True}, f"pinned {project}/{run}",
              as_json=as_json)  # fmt: skip


@app.command("unpin")
@handle_errors
def unpin_command(project: str, run: str, as_json: bool = JsonOption) -> None:
    """Let retention consider a pinned run again."""
    settings = runtime_settings()
    with session_factory(settings) as factory, transaction(factory) as session:
        retention.unpin_run(session, project=project, run_path=run, actor=ACTOR)
    emit_line({"project": project, "run": run, "pinned": False}, f"unpinned {project}/{run}",
              as_json=as_json)  # fmt: skip


@trash_app.command("list")
@handle_errors
def trash_list(as_json: bool = JsonOption) -> None:
    """Runs in the trash, with when each will be purged."""
    settings = runtime_settings()
    with session_factory(settings) as factory, factory() as session:
        rows = [trash.describe_entry(e, settings) for e in trash.list_trash(session)]

    def human() -> None:
        print_table(
            ("id", "run", "size", "why", time_column("trashed"), time_column("purged after")),
            [(str(r["id"]), str(r["run"]), human_bytes(r["bytes"]), ", ".join(r["reasons"]),
              iso_utc(r["trashed_at"]) or "-", iso_utc(r["purge_after"]) or "-") for r in rows],
            empty="the trash is empty; retention moves runs there "
                  "(`tbhub admin retention plan` shows which it would)",
        )  # fmt: skip

    emit(rows, as_json=as_json, human=human)


@trash_app.command("restore")
@handle_errors
def trash_restore(
    run: str = typer.Argument(..., help="A trash id, or <project>/<run path>."),
    as_json: bool = JsonOption,
) -> None:
    """Move a trashed run back to where it was."""
    settings = runtime_settings()
    with session_factory(settings) as factory:
        entry = trash.restore(factory, settings, run, actor=ACTOR)
    where = settings.storage / entry.project / entry.run_path
    emit_line({"id": entry.id, "run": f"{entry.project}/{entry.run_path}", "path": str(where)},
              f"restored {where}", as_json=as_json)  # fmt: skip


@trash_app.command("purge")
@handle_errors
def trash_purge(
    older_than: float | None = typer.Option(
        None, "--older-than", help="Days in the trash (default: TBHUB_TRASH_GRACE_DAYS; 0: all)."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Delete for good the runs that have been in the trash long enough."""
    settings = runtime_settings()
    days = settings.trash_grace_days if older_than is None else older_than
    with session_factory(settings) as factory:
        report = trash.purge(factory, settings, older_than_days=days, actor=ACTOR)
    emit_line({"purged": report.entries, "bytes": report.bytes},
              f"purged {report.entries} runs ({human_bytes(report.bytes)})",
              as_json=as_json)  # fmt: skip
