"""crashed, finished and stalled: what the runs table says about a run, looked at by the
monitor (health/monitor.py) every few seconds on the leader.

A run whose status became failed or killed (`tbhub run` saw its command exit non-zero or be
killed, or the job reported it: domain/runs.update_run writes each change into the run's
status history) is `crashed`; one that finished is `finished`, an incident born resolved (a
notification, not a problem). A `running` run whose files got nothing new for its project's
`stalled` minutes is `stalled`, resolved when it writes again or leaves `running`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session, lazyload

from tbhub.core.models import AlertRule, Incident, RetentionState, Run, RunEvent, RunStatus
from tbhub.core.settings import Settings
from tbhub.health import incidents
from tbhub.health.detectors import Detection
from tbhub.health.rules import RuleSet

STATUS_LOOKBACK = timedelta(minutes=10)  # status changes made while no monitor ran
EVENTS_PER_PASS = 1000
LATE = timedelta(minutes=1)  # how late a status change may become visible and still count
CRASHED = {
    RunStatus.failed.value: "failed (its job exited with an error or reported a failure)",
    RunStatus.killed.value: "was killed (a signal or an interrupt)",
}
ENDED = (RunStatus.finished.value, RunStatus.failed.value, RunStatus.killed.value)
Rules = Callable[[int, Session], RuleSet]  # project id -> its rules


def _runs_of(session: Session, run_ids: set[int]) -> dict[int, Run]:
    """The runs by id, in one query (a job array's registrations are hundreds of events a
    pass), their tags left to load if asked for."""
    if not run_ids:
        return {}
    query = select(Run).where(Run.id.in_(run_ids)).options(lazyload(Run.tag_rows))
    return {run.id: run for run in session.scalars(query)}


class RunTable:
    def __init__(self, settings: Settings, rules: Rules) -> None:
        self.settings = settings
        self.rules = rules
        self._cursor: int | None = None  # the newest run event looked at
        self._seen_events: dict[int, datetime] = {}  # run events of the last LATE, by id

    def look(self, session: Session, now: datetime) -> int:
        """Record what changed since the last look; the new incidents."""
        return self._status_changes(session, now) + self._stalls(session, now)

    def _status_changes(self, session: Session, now: datetime) -> int:
        """crashed and finished, from the runs' status history (domain/runs.note_event).

        Ids are handed out before commit, so on PostgreSQL a lower id can become visible
        after a higher one: the last `LATE` of history is looked at again, by id, once."""
        if self._cursor is None:
            before = now - STATUS_LOOKBACK
            self._cursor = (
                session.scalar(select(func.max(RunEvent.id)).where(RunEvent.at < before)) or 0
            )
        recent = now - LATE
        status = select(RunEvent).where(RunEvent.kind == "status").order_by(RunEvent.id)
        # The late ones by id first: a job array's registrations are a minute of history
        # looked at again each pass, and all but a few were seen already.
        late_ids = select(RunEvent.id).where(
            RunEvent.kind == "status", RunEvent.id <= self._cursor, RunEvent.at >= recent
        )
        unseen = [i for i in session.scalars(late_ids) if i not in self._seen_events]
        late = status.where(RunEvent.id.in_(unseen[:EVENTS_PER_PASS]))
        newer = status.where(RunEvent.id > self._cursor).limit(EVENTS_PER_PASS)
        raised = 0
        events = [*(session.scalars(late) if unseen else ()), *session.scalars(newer)]
        # A job array's registrations are hundreds of `running` events a pass, and almost
        # none has a crashed incident to resolve: which have one is asked once, and only
        # the runs of other events are loaded.
        running = RunStatus.running.value
        crashed = incidents.with_open(session, run_ids={e.run_id for e in events},
                                      detector="crashed")  # fmt: skip
        runs = _runs_of(session, {e.run_id for e in events if e.value != running})
        for event in events:
            if event.id in self._seen_events:
                continue
            self._seen_events[event.id] = event.at
            self._cursor = max(self._cursor, event.id)
            if event.value == running:
                self._resumed(session, event.run_id, now, crashed)
            elif (run := runs.get(event.run_id)) is not None:
                raised += self._status_change(session, run, event, now, crashed)
        self._seen_events = {i: at for i, at in self._seen_events.items() if at >= recent - LATE}
        return raised

    @staticmethod
    def _resumed(session: Session, run_id: int, now: datetime, crashed: set[int]) -> None:
        """A run running (again): its crashed incident, if open, is resolved."""
        if run_id in crashed:
            incidents.resolve_open(session, run_id=run_id, detectors=("crashed",), now=now)
            crashed.discard(run_id)

    def _status_change(
        self, session: Session, run: Run, event: RunEvent, now: datetime, crashed: set[int]
    ) -> int:
        """`crashed`: the runs with a crashed incident open, kept current as this pass goes."""
        rules = self.rules(run.project_id, session)
        if event.value not in ENDED:
            return 0
        incidents.resolve_open(
            session, run_id=run.id, detectors=(*incidents.CURVE_DETECTORS, "stalled"), now=now
        )
        detector = "finished" if event.value == RunStatus.finished.value else "crashed"
        if not rules.on(detector):
            return 0
        latest = session.scalar(
            select(Incident)
            .where(Incident.run_id == run.id, Incident.detector == detector)
            .order_by(Incident.id.desc())
            .limit(1)
        )
        if latest is not None and latest.last_seen >= event.at:
            return 0  # recorded before a restart of the monitor
        message = (
            f"{run.path} finished"
            if detector == "finished"
            else f"{run.path} {CRASHED[event.value]}"
        )
        detection = Detection(detector, None, None, event.at.timestamp(), None, message)
        incident = incidents.record(
            session, run=run, detection=detection, now=now, resolved=detector == "finished"
        )
        if detector == "crashed":
            crashed.add(run.id)  # open now, whether new or counted on the one open before
        if incident is not None and event.value == RunStatus.killed.value:
            incident.severity = "warning"
        return int(incident is not None)

    def _stalls(self, session: Session, now: datetime) -> int:
        """Open a `stalled` incident on each running run quiet for its rule's minutes, and
        resolve the ones whose run wrote again or ended."""
        default = self.settings.run_stalled_minutes
        custom = session.scalar(
            select(func.min(AlertRule.threshold)).where(AlertRule.detector == "stalled")
        )
        least = min(default, custom) if custom is not None else default
        last = func.coalesce(Run.last_write, Run.created_at)
        query = select(Run).where(
            Run.status == RunStatus.running,
            Run.retention_state == RetentionState.present,
            last < now - timedelta(minutes=least),
        )
        quiet = {run.id: run for run in session.scalars(query)}
        open_stalls = list(
            session.scalars(
                select(Incident).where(
                    Incident.detector == "stalled", Incident.resolved_at.is_(None)
                )
            )
        )
        for incident in open_stalls:
            run = quiet.get(incident.run_id) if incident.run_id is not None else None
            if run is None or not self._is_stalled(session, run, now):
                incident.resolved_at, incident.resolved_by = now, incidents.MONITOR
        stalled_now = {i.run_id for i in open_stalls if i.resolved_at is None}
        raised = 0
        for run in quiet.values():
            if run.id in stalled_now or not self._is_stalled(session, run, now):
                continue
            rules = self.rules(run.project_id, session)
            since = run.last_write or run.created_at
            minutes = (now - since).total_seconds() / 60
            detection = Detection(
                "stalled",
                None,
                None,
                since.timestamp(),
                None,
                f"{run.path} is running but wrote nothing for "
                f"{minutes:.0f} minutes (rule: {rules['stalled'].threshold:g})",
            )
            raised += incidents.record(session, run=run, detection=detection, now=now) is not None
        return raised

    def _is_stalled(self, session: Session, run: Run, now: datetime) -> bool:
        rule = self.rules(run.project_id, session)["stalled"]
        if not rule.enabled or rule.threshold is None:
            return False
        since = run.last_write or run.created_at
        return now - since > timedelta(minutes=rule.threshold)
