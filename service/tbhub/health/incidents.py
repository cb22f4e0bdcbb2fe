"""Incidents: each detection becomes one, a repeat is counted on the open one, and a new
incident is handed to the notification outbox (health/notify/outbox.py) in the same
transaction, so it is sent once whatever happens after the commit.

An incident is keyed by (run, detector, tag). A detection at a step no later than the
newest one already recorded under that key is a re-read (the monitor started over after a
restart or a rewritten file) and changes nothing.
"""

from __future__ import annotations

import importlib
import logging
import math
import re
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tbhub.core.errors import NotFound
from tbhub.core.models import Incident, Project, Run
from tbhub.core.timestamps import iso_utc
from tbhub.health.detectors import TAG_MAX, Detection, value_text
from tbhub.health.rules import SEVERITY

log = logging.getLogger("tbhub.health")

MONITOR = "monitor"
MESSAGE_MAX = 1024
# What a run's end closes: problems with its curves (the run will write no more).
CURVE_DETECTORS = ("nan", "divergence", "grad_explosion", "plateau")


def _enqueue(session: Session, incident: Incident) -> None:
    """Hand a new incident to the outbox, if this tbhub has one (health/notify)."""
    try:
        outbox: Any = importlib.import_module("tbhub.health.notify.outbox")
    except ImportError:
        return
    outbox.enqueue(session, incident)


def _utc(ts: float | None) -> datetime | None:
    if ts is None or not math.isfinite(ts) or ts <= 0:
        return None
    try:
        return datetime.fromtimestamp(ts, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _latest(session: Session, run_id: int, detector: str, tag: str | None) -> Incident | None:
    query = select(Incident).where(Incident.run_id == run_id, Incident.detector == detector)
    query = query.where(Incident.tag.is_(None) if tag is None else Incident.tag == tag)
    return session.scalar(query.order_by(Incident.id.desc()).limit(1))


def record(
    session: Session, *, run: Run, detection: Detection, now: datetime, resolved: bool = False
) -> Incident | None:
    """Record one detection on `run`: a new incident (returned, and enqueued), a repeat
    counted on the open one, or nothing for a re-read."""
    latest = _latest(session, run.id, detection.detector, _tag(detection))
    return _apply(session, run, latest, detection, now, resolved=resolved)[1]


def record_all(
    session: Session, *, run: Run, detections: list[Detection], now: datetime
) -> list[Incident]:
    """Record a pass's detections on one run (one query per curve and detector); the new
    incidents."""
    groups: dict[tuple[str, str | None], list[Detection]] = {}
    for detection in detections:
        groups.setdefault((detection.detector, _tag(detection)), []).append(detection)
    new: list[Incident] = []
    for (detector, tag), group in groups.items():
        latest = _latest(session, run.id, detector, tag)
        for detection in group:
            latest, incident = _apply(session, run, latest, detection, now)
            if incident is not None:
                new.append(incident)
    return new


def _tag(detection: Detection) -> str | None:
    return detection.tag[:TAG_MAX] if detection.tag is not None else None


def _apply(
    session: Session,
    run: Run,
    latest: Incident | None,
    detection: Detection,
    now: datetime,
    *,
    resolved: bool = False,
) -> tuple[Incident | None, Incident | None]:
    """(the key's newest incident now, the incident this detection opened if any)."""
    step = detection.step
    last_step = latest.last_step if latest is not None else None
    if step is not None and last_step is not None and step <= last_step:
        return latest, None  # read before: not a new sighting
    if latest is not None and latest.resolved_at is None:
        latest.count += 1
        latest.last_seen = now
        latest.last_step = step if step is not None else latest.last_step
        return latest, None
    value = detection.value
    incident = Incident(
        project_id=run.project_id,
        run_id=run.id,
        run_path=run.path,
        tag=_tag(detection),
        detector=detection.detector,
        severity=SEVERITY[detection.detector],
        step=step,
        last_step=step,
        wall_time=_utc(detection.wall_time),
        value=value if value is not None and math.isfinite(value) else None,
        value_text=value_text(value),
        message=detection.message[:MESSAGE_MAX],
        first_seen=now,
        last_seen=now,
        count=1,
        resolved_at=now if resolved else None,
        resolved_by=MONITOR if resolved else None,
    )
    session.add(incident)
    session.flush()
    log.warning("incident %d in %s: %s", incident.id, run.path, incident.message)
    _enqueue(session, incident)
    return incident, incident


def with_open(session: Session, *, run_ids: set[int], detector: str) -> set[int]:
    """Which of these runs have an incident of `detector` open."""
    if not run_ids:
        return set()
    query = select(Incident.run_id).where(
        Incident.run_id.in_(run_ids),
        Incident.detector == detector,
        Incident.resolved_at.is_(None),
    )
    return set(session.scalars(query))


def resolve_open(
    session: Session, *, run_id: int, detectors: tuple[str, ...], now: datetime, by: str = MONITOR
) -> int:
    """Close the run's open incidents of these detectors; how many."""
    query = select(Incident).where(
        Incident.run_id == run_id,
        Incident.detector.in_(detectors),
        Incident.resolved_at.is_(None),
    )
    closed = 0
    for incident in session.scalars(query):
        incident.resolved_at, incident.resolved_by = now, by
        closed += 1
    return closed


def resolve(
    session: Session, *, project_id: int, incident_id: int, actor: str
) -> tuple[Incident, bool]:
    """Resolve one incident by hand; whether it was open (resolving a resolved one changes
    nothing)."""
    incident = session.get(Incident, incident_id)
    if incident is None or incident.project_id != project_id:
        raise NotFound(
            f"no incident {incident_id} in this project; list them with GET "
            "/api/v1/projects/<project>/incidents"
        )
    if incident.resolved_at is not None:
        return incident, False
    incident.resolved_at, incident.resolved_by = datetime.now(UTC), actor
    session.flush()
    return incident, True


def list_incidents(
    session: Session,
    *,
    project_id: int,
    run_path: str | None = None,
    detector: str | None = None,
    open_only: bool | None = None,
    before_id: int | None = None,
    limit: int = 100,
) -> list[Incident]:
    """The project's incidents, newest first."""
    query = select(Incident).where(Incident.project_id == project_id)
    if run_path is not None:
        query = query.where(Incident.run_path == run_path)
    if detector is not None:
        query = query.where(Incident.detector == detector)
    if open_only is not None:
        column = Incident.resolved_at
        query = query.where(column.is_(None) if open_only else column.is_not(None))
    if before_id is not None:
        query = query.where(Incident.id < before_id)
    return list(session.scalars(query.order_by(Incident.id.desc()).limit(limit)))


def open_count(session: Session, *, project_id: int) -> int:
    query = select(func.count()).where(
        Incident.project_id == project_id, Incident.resolved_at.is_(None)
    )
    return int(session.scalar(query) or 0)


def open_by_run(session: Session, *, project_id: int) -> dict[int, dict[str, int]]:
    """run id -> {severity: open incidents}: the project page's health badges."""
    query = (
        select(Incident.run_id, Incident.severity, func.count())
        .where(Incident.project_id == project_id, Incident.resolved_at.is_(None))
        .group_by(Incident.run_id, Incident.severity)
    )
    badges: dict[int, dict[str, int]] = {}
    for run_id, severity, count in session.execute(query):
        if run_id is not None:
            badges.setdefault(run_id, {})[severity] = int(count)
    return badges


# What a regular expression in the browser (TensorBoard's filters) needs escaped: Python's
# re.escape also escapes `-` and spaces, which a JavaScript regex with the `u` flag refuses.
REGEX_SPECIAL = re.compile(r"([\\^$.*+?()[\]{}|/])")


def regex_literal(text: str) -> str:
    """`text` as a regular expression that matches it literally, in Python and JavaScript."""
    return REGEX_SPECIAL.sub(r"\\\1", text)


def run_filter(run_path: str) -> str:
    """TensorBoard's run filter for one run: it and the runs below it (train/, validation/)."""
    return f"^{regex_literal(run_path)}(/|$)"


def board_link(project: str, incident: Incident) -> str:
    """The project's board, filtered to the incident's run (and its curve)."""
    params = {"runFilter": run_filter(incident.run_path)}
    if incident.tag:
        tag = incident.tag
        # The curve name may start with the run's subdirectory (train/ ...), which the
        # board shows as part of the run, not of the tag: accept both readings.
        last = tag.rsplit("/", 1)[-1] if "/" in tag else None
        alternatives = [regex_literal(tag)] + ([regex_literal(last)] if last else [])
        params["tagFilter"] = f"^({'|'.join(alternatives)})$"
    return f"/boards/{quote(project, safe='')}/?{urlencode(params)}#timeseries"


def incident_json(incident: Incident, project: str) -> dict[str, Any]:
    return {
        "id": incident.id,
        "project": project,
        "run_id": incident.run_id,
        "run_path": incident.run_path,
        "tag": incident.tag,
        "detector": incident.detector,
        "severity": incident.severity,
        "step": incident.step,
        "last_step": incident.last_step,
        "wall_time": iso_utc(incident.wall_time),
        "value": incident.value,
        "value_text": incident.value_text,
        "message": incident.message,
        "first_seen": iso_utc(incident.first_seen),
        "last_seen": iso_utc(incident.last_seen),
        "count": incident.count,
        "resolved_at": iso_utc(incident.resolved_at),
        "resolved_by": incident.resolved_by,
        "open": incident.resolved_at is None,
        "board_url": board_link(project, incident),
    }


def open_totals(session: Session) -> tuple[list[tuple[str, str, int]], list[tuple[str, int]]]:
    """/metrics: open incidents by (project, detector), and all incidents by detector."""
    open_query = (
        select(Project.name, Incident.detector, func.count())
        .join(Project, Project.id == Incident.project_id)
        .where(Incident.resolved_at.is_(None))
        .group_by(Project.name, Incident.detector)
    )
    total_query = select(Incident.detector, func.count()).group_by(Incident.detector)
    return (
        [(p, d, int(n)) for p, d, n in session.execute(open_query)],
        [(d, int(n)) for d, n in session.execute(total_query)],
    )
