"""`tbhub alerts list` (a project's run-health incidents, over the API) and `tbhub admin
alerts show|set` (a project's alert rules, on the database: what an operator uses)."""

from __future__ import annotations

from typing import Any

import typer

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    handle_errors,
    out_console,
    print_table,
    runtime_settings,
)

app = typer.Typer(help="Run-health incidents of a project, over the API (needs `tbhub login`).",
                  no_args_is_help=True)  # fmt: skip
admin_app = typer.Typer(help="Run-health alert rules of a project: show, set.",
                        no_args_is_help=True)  # fmt: skip
ACTOR = "cli"
ProjectOption = typer.Option(..., "--project", "-p", envvar="TBHUB_PROJECT",
                             help="The project.")  # fmt: skip


@app.command("list")
@handle_errors
def list_command(
    project: str = ProjectOption,
    run: str | None = typer.Option(None, "--run", help="Only this run (its path)."),
    detector: str | None = typer.Option(None, "--detector", help="Only this detector."),
    show_all: bool = typer.Option(False, "--all", help="Resolved incidents too."),
    limit: int = typer.Option(100, "--limit", min=1, max=500, help="At most this many."),
    as_json: bool = JsonOption,
) -> None:
    """The project's open incidents (with --all, resolved ones too), newest first."""
    from urllib.parse import quote

    from tbhub.client import Client

    params: dict[str, Any] = {"limit": limit}
    if run is not None:
        params["run"] = run
    if detector is not None:
        params["detector"] = detector
    if not show_all:
        params["open"] = "true"
    with Client() as client:
        body = client.json("GET", f"/api/v1/projects/{quote(project, safe='')}/incidents",
                           params=params)  # fmt: skip

    def human() -> None:
        rows = [(str(i["id"]), i["severity"], i["detector"], i["run_path"], i["tag"] or "",
                 "" if i["step"] is None else str(i["step"]), i["value_text"] or "",
                 str(i["count"]), "open" if i["open"] else "resolved", i["first_seen"])
                for i in body["incidents"]]  # fmt: skip
        print_table(("id", "severity", "detector", "run", "tag", "step", "value", "count",
                     "state", "first seen"), rows,
                    empty=f"no {'' if show_all else 'open '}incidents in {project}")  # fmt: skip
        if rows:
            out_console.print(f"{body['open']} open in {project}", highlight=False)

    emit(body, as_json=as_json, human=human)


def _print_rules(rules: list[dict[str, Any]]) -> None:
    def shown(value: Any) -> str:
        return "" if value is None else ("on" if value is True else "off" if value is False
                                         else str(value))  # fmt: skip

    print_table(("detector", "enabled", "tag regex", "threshold", "window", "histograms",
                 "changed"),
                [(r["detector"], shown(r["enabled"]), shown(r["tag_regex"]),
                  shown(r["threshold"]), shown(r["window"]),
                  shown(r["histograms"]) if r["detector"] == "nan" else "",
                  "yes" if r["customized"] else "") for r in rules],
                empty="no detectors")  # fmt: skip


def _rules_of(project: str, change: tuple[str, dict[str, Any], bool] | None) -> list[Any]:
    from sqlalchemy import select

    from tbhub.core.errors import NotFound
    from tbhub.core.models import Project
    from tbhub.domain import audit
    from tbhub.health import rules

    settings = runtime_settings()
    with db_session(settings) as session:
        project_id = session.scalar(select(Project.id).where(Project.name == project))
        if project_id is None:
            raise NotFound(f"no project named {project!r}; list them with "
                           "`tbhub admin project list`")  # fmt: skip
        if change is not None:
            detector, values, reset = change
            rules.set_rule(session, project_id=project_id, detector=detector, change=values,
                           actor=ACTOR, reset=reset)  # fmt: skip
            audit.record(session, actor=ACTOR, action="alerts.rules", target=project,
                         changes={detector: "reset" if reset else values})  # fmt: skip
        minutes = settings.run_stalled_minutes
        ruleset = rules.effective_rules(session, project_id=project_id, stalled_minutes=minutes)
        return rules.describe(ruleset, minutes)


@admin_app.command("show")
@handle_errors
def show_command(project: str, as_json: bool = JsonOption) -> None:
    """Each detector's effective rule in PROJECT, and whether the project changed it."""
    described = _rules_of(project, None)
    emit({"project": project, "rules": described}, as_json=as_json,
         human=lambda: _print_rules(described))  # fmt: skip


@admin_app.command("set")
@handle_errors
def set_command(
    project: str,
    detector: str = typer.Option(
        ...,
        "--detector",
        "-d",
        help="nan, divergence, grad_explosion, plateau, stalled, crashed or finished.",
    ),
    tag_regex: str | None = typer.Option(
        None,
        "--tag-regex",
        help="The curves it looks at (a Python regular expression, searched in the tag).",
    ),
    threshold: float | None = typer.Option(
        None,
        "--threshold",
        help="Robust z-score "
        "(divergence, grad_explosion), least relative "
        "improvement (plateau) or minutes (stalled).",
    ),
    window: int | None = typer.Option(
        None,
        "--window",
        help="Recent points looked at (divergence, grad_explosion) or steps (plateau).",
    ),
    enabled: bool | None = typer.Option(None, "--on/--off", help="Turn the detector on or off."),
    histograms: bool | None = typer.Option(
        None, "--histograms/--no-histograms", help="nan: look into histograms too."
    ),
    reset: bool = typer.Option(False, "--reset", help="Back to every default for DETECTOR."),
    as_json: bool = JsonOption,
) -> None:
    """Change one detector's rule in PROJECT (what is not given stays); an invalid rule is
    refused and nothing is changed."""
    values = {name: value for name, value in (("tag_regex", tag_regex), ("threshold", threshold),
              ("window", window), ("enabled", enabled), ("histograms", histograms))
              if value is not None}  # fmt: skip
    described = _rules_of(project, (detector, values, reset))
    emit({"project": project, "rules": described}, as_json=as_json,
         human=lambda: _print_rules(described))  # fmt: skip
