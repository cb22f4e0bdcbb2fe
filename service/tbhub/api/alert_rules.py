"""/api/v1 a project's alert rules: the run-health detectors' settings (health/rules.py).
Members read them; owners (and instance admins) change them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from tbhub.auth.caller import require_project
from tbhub.core.bounds import Count, FiniteFloat
from tbhub.core.errors import InvalidInput
from tbhub.core.models import Role
from tbhub.domain import audit
from tbhub.health import rules
from tbhub.http.deps import CallerDep, ContextDep, ProjectInPath, SessionDep

router = APIRouter(prefix="/api/v1", tags=["health"])


class RuleIn(BaseModel):
    """One detector's change: a field left out stays as it is, null goes back to the default."""

    model_config = ConfigDict(extra="forbid")

    detector: Literal[rules.DETECTORS]  # type: ignore[valid-type]
    enabled: StrictBool | None = None
    tag_regex: Annotated[str | None, Field(max_length=rules.REGEX_MAX)] = None
    threshold: FiniteFloat | None = None  # the range per detector: rules.check_change
    window: Count | None = None
    histograms: StrictBool | None = None


class RulesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: Annotated[list[RuleIn], Field(min_length=1, max_length=len(rules.DETECTORS))]


def _described(session: SessionDep, context: ContextDep, project_id: int) -> dict[str, Any]:
    minutes = context.settings.run_stalled_minutes
    ruleset = rules.effective_rules(session, project_id=project_id, stalled_minutes=minutes)
    return {"rules": rules.describe(ruleset, minutes)}


@router.get("/projects/{name}/alert-rules")
def get_rules(
    name: ProjectInPath, caller: CallerDep, session: SessionDep, context: ContextDep
) -> dict[str, Any]:
    """Every detector's effective rule, whether the project changed it, and its default."""
    project = require_project(context.access, caller, name, Role.viewer)
    return _described(session, context, project.project_id)


@router.put("/projects/{name}/alert-rules")
def set_rules(
    name: ProjectInPath,
    body: RulesIn,
    caller: CallerDep,
    session: SessionDep,
    context: ContextDep,
) -> dict[str, Any]:
    """Change detectors' rules, all or nothing: one invalid rule (a regex that does not
    compile, a threshold out of range...) is a 422 naming it, and nothing is saved."""
    project = require_project(context.access, caller, name, Role.owner)
    detectors = [rule.detector for rule in body.rules]
    if len(set(detectors)) != len(detectors):
        raise InvalidInput("each detector may appear once in rules")
    changes = [(r.detector, r.model_dump(exclude_unset=True, exclude={"detector"}))
               for r in body.rules]  # fmt: skip
    for detector, change in changes:
        rules.check_change(detector, change)
    for detector, change in changes:
        rules.set_rule(session, project_id=project.project_id, detector=detector, change=change,
                       actor=caller.name)  # fmt: skip
    audit.record(session, actor=caller.name, action="alerts.rules", target=name,
                 changes=dict(changes))  # fmt: skip
    return _described(session, context, project.project_id)
