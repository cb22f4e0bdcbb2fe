"""Run health on the pages (the incidents health/incidents.py records): a badge per run on
the project page, a timeline of a run's incidents on its page, each linking to the board
filtered to that run and curve, and "Resolve" for editors (the API's role for it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from tbhub.auth.caller import ProjectAccess, require_project
from tbhub.core.bounds import INT64_MAX, TOKEN_MAX
from tbhub.core.errors import NotFound
from tbhub.core.models import Incident, Role
from tbhub.domain.runs import get_run
from tbhub.health import incidents
from tbhub.health.rules import DETECTORS
from tbhub.http.deps import ContextDep, ProjectInPath, SessionDep
from tbhub.web.render import WebUser, caller_of, check_form_token, done

router = APIRouter(include_in_schema=False)

TIMELINE_MAX = 100  # a run's newest incidents on its page; the API pages through all
# What each detector's badge says, and its order of concern (worst first).
LABELS = {
    "nan": "NaN",
    "divergence": "diverging",
    "crashed": "crashed",
    "grad_explosion": "grad explosion",
    "stalled": "stalled",
    "plateau": "plateau",
    "finished": "finished",
}
SEVERITY_ORDER = ("error", "warning", "info")
# The incident kinds a form ticks (a channel's, an email preference's): bounded like the API's.
KindsField = Annotated[list[Annotated[str, Form(max_length=16)]], Form(max_length=len(DETECTORS))]


@dataclass(frozen=True)
class Badge:
    """A run's health on the project page: its worst open incident, and how many are open."""

    severity: str  # ok | error | warning | info
    label: str
    open: int

    @property
    def title(self) -> str:
        if self.open == 0:
            return "No open incident"
        return f"{self.open} open incident{'' if self.open == 1 else 's'}; the worst: {self.label}"


HEALTHY = Badge("ok", "healthy", 0)


def _concern(incident: tuple[str, str]) -> tuple[int, int]:
    """Worst first: by severity, then by the detectors' order in LABELS (unknown ones last)."""
    detector, severity = incident
    last = len(LABELS)
    severity_rank = {s: i for i, s in enumerate(SEVERITY_ORDER)}.get(severity, last)
    return severity_rank, {d: i for i, d in enumerate(LABELS)}.get(detector, last)


def run_badges(session: Session, *, project_id: int, run_ids: list[int]) -> dict[int, Badge]:
    """The badge of each listed run (the page's runs only: at most one page of them)."""
    if not run_ids:
        return {}
    rows = session.execute(
        select(Incident.run_id, Incident.detector, Incident.severity).where(
            Incident.project_id == project_id,
            Incident.run_id.in_(run_ids),
            Incident.resolved_at.is_(None),
        )
    )
    found: dict[int, list[tuple[str, str]]] = {}
    for run_id, detector, severity in rows:
        assert run_id is not None  # the query's own filter
        found.setdefault(run_id, []).append((detector, severity))
    badges = {}
    for run_id in run_ids:
        open_ones = sorted(found.get(run_id, []), key=_concern)
        if not open_ones:
            badges[run_id] = HEALTHY
            continue
        detector, severity = open_ones[0]
        badges[run_id] = Badge(severity, LABELS.get(detector, detector), len(open_ones))
    return badges


def shown(incident: Incident, project: str) -> dict[str, Any]:
    """An incident as the API shows it (with its board link), and its badge's label."""
    label = LABELS.get(incident.detector, incident.detector)
    return {**incidents.incident_json(incident, project), "label": label}


def run_timeline(session: Session, *, project: ProjectAccess, run_path: str) -> list[Any]:
    """The run's newest incidents, oldest first."""
    found = incidents.list_incidents(session, project_id=project.project_id, run_path=run_path,
                                     limit=TIMELINE_MAX)  # fmt: skip
    return [shown(incident, project.name) for incident in reversed(found)]


IncidentId = Annotated[int, Path(ge=1, le=INT64_MAX)]
RunId = Annotated[int, Path(ge=1, le=INT64_MAX)]


@router.post("/projects/{project}/runs/{run_id}/incidents/{incident_id}/resolve")
def resolve(
    request: Request,
    project: ProjectInPath,
    run_id: RunId,
    incident_id: IncidentId,
    user: WebUser,
    session: SessionDep,
    context: ContextDep,
    csrf_token: Annotated[str, Form(max_length=TOKEN_MAX)] = "",
) -> Response:
    """Close an incident by hand (editors, as in the API); resolving it twice changes nothing."""
    check_form_token(request, csrf_token, "resolve incident")
    access = require_project(context.access, caller_of(user), project, Role.editor)
    run = get_run(session, project_id=access.project_id, run_id=run_id)
    incident = session.get(Incident, incident_id)
    if incident is None or incident.run_id != run.id:
        raise NotFound(f"run {run.path} has no incident {incident_id}")
    incidents.resolve(session, project_id=access.project_id, incident_id=incident_id,
                      actor=user.name)  # fmt: skip
    return done(f"/projects/{project}/runs/{run.id}#incidents", "incident_resolved")
