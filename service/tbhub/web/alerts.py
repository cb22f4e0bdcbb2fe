"""/projects/<p>/alerts: the project's incidents and the rules of its detectors.

Every member sees both; owners (and admins) change a detector's rule or put it back to the
default, as PUT /api/v1/projects/<p>/alert-rules does: the same check (health/rules.py
`check_change`), so an invalid rule is refused with the same message, and nothing is saved."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from tbhub.auth.caller import ProjectAccess, require_project
from tbhub.core.bounds import TOKEN_MAX
from tbhub.core.errors import InvalidInput, TbhubError
from tbhub.core.models import Role, User
from tbhub.health import incidents, rules
from tbhub.http.deps import AppContext, ContextDep, ProjectInPath, SessionDep
from tbhub.web.health import LABELS, shown
from tbhub.web.render import WebUser, caller_of, form_page, project_form

router = APIRouter(include_in_schema=False)

SHOWN_INCIDENTS = 50  # the newest; GET /api/v1/projects/<p>/incidents pages through all
CsrfField = Annotated[str, Form(max_length=TOKEN_MAX)]
Detector = Annotated[str, Path(max_length=16)]
# What a threshold means for each detector that takes one.
THRESHOLD_UNITS = {
    "divergence": "robust z-score above the recent median",
    "grad_explosion": "robust z-score above the recent median (of log values)",
    "plateau": "the least relative improvement that counts",
    "stalled": "minutes without a new step",
}
WINDOW_UNITS = {"divergence": "recent points", "grad_explosion": "recent points",
                "plateau": "steps"}  # fmt: skip


def _rules(session: Session, context: AppContext, access: ProjectAccess) -> list[dict[str, Any]]:
    minutes = context.settings.run_stalled_minutes
    ruleset = rules.effective_rules(session, project_id=access.project_id,
                                    stalled_minutes=minutes)  # fmt: skip
    return [
        {**row, "label": LABELS.get(row["detector"], row["detector"]),
         "severity": rules.SEVERITY[row["detector"]],
         "takes_regex": row["detector"] in rules.ON_CURVES,
         "threshold_unit": THRESHOLD_UNITS.get(row["detector"]),
         "window_unit": WINDOW_UNITS.get(row["detector"])}
        for row in rules.describe(ruleset, minutes)
    ]  # fmt: skip


def _show(
    request: Request, session: Session, context: AppContext, user: User, access: ProjectAccess,
    *, error: TbhubError | None = None, failed: str | None = None,
) -> Response:  # fmt: skip
    project = access.name
    recent = incidents.list_incidents(session, project_id=access.project_id,
                                      limit=SHOWN_INCIDENTS)  # fmt: skip
    values = {
        "project": project,
        "tab": "alerts",
        "is_owner": access.role == Role.owner,
        "rules": _rules(session, context, access),
        "incidents": [shown(incident, project) for incident in recent],
        "open_count": incidents.open_count(session, project_id=access.project_id),
        "shown_incidents": SHOWN_INCIDENTS,
        "failed": failed,  # the detector whose form was refused: shown open
    }
    return form_page(request, "alerts.html", values, user=user, error=error)


@router.get("/projects/{name}/alerts")
def alerts_page(
    request: Request, name: ProjectInPath, user: WebUser, session: SessionDep, context: ContextDep
) -> Response:
    access = require_project(context.access, caller_of(user), name, Role.viewer)
    return _show(request, session, context, user, access)


def _number(text: str, what: str, kind: type[int] | type[float]) -> int | float | None:
    """A form field: empty is the default (None), else a number of the kind wanted."""
    text = text.strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError:
        whole = "a whole number" if kind is int else "a number"
        raise InvalidInput(f"{what} must be {whole}, not {text[:40]!r}") from None


def rule_change(
    detector: str, *, enabled: str, tag_regex: str, threshold: str, window: str, histograms: str
) -> dict[str, Any]:
    """The form's fields as a rule change: an empty field (or "default") is the default."""
    where = f"{detector}:"
    change: dict[str, Any] = {
        "enabled": {"on": True, "off": False}.get(enabled),
        "tag_regex": tag_regex or None,
        "threshold": _number(threshold, f"{where} threshold", float),
        "window": _number(window, f"{where} window", int),
        "histograms": {"on": True, "off": False}.get(histograms),
    }
    return rules.check_change(detector, change)


Choice = Annotated[Literal["default", "on", "off"], Form()]
Text = Annotated[str, Form(max_length=rules.REGEX_MAX)]
NumberText = Annotated[str, Form(max_length=32)]


@router.post("/projects/{name}/alerts/{detector}")
def save_rule(
    request: Request,
    name: ProjectInPath,
    detector: Detector,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    enabled: Choice = "default",
    tag_regex: Text = "",
    threshold: NumberText = "",
    window: NumberText = "",
    histograms: Choice = "default",
    reset: Annotated[str, Form(max_length=8)] = "",
    csrf_token: CsrfField = "",
) -> Response:
    """One detector's rule as the form gives it, or (`reset`) back to every default."""

    def save(access: ProjectAccess, tx: Session) -> None:
        if detector not in rules.DETECTORS:
            raise InvalidInput(f"unknown detector {detector[:20]!r}; one of "
                               f"{', '.join(rules.DETECTORS)}")  # fmt: skip
        change = {} if reset else rule_change(detector, enabled=enabled, tag_regex=tag_regex,
                                              threshold=threshold, window=window,
                                              histograms=histograms)  # fmt: skip
        rules.set_rule(tx, project_id=access.project_id, detector=detector, change=change,
                       actor=user.name, reset=bool(reset))  # fmt: skip

    return project_form(
        request, user, name, csrf_token=csrf_token, what="alert rule", need=Role.owner,
        action=save, back=f"/projects/{name}/alerts#rule-{detector}", notice="rule_saved",
        refused=lambda access, error: _show(request, session, context, user, access,
                                            error=error, failed=detector),
    )  # fmt: skip
