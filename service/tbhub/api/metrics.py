"""/metrics in the Prometheus text format: backups, trash, boards (states, memory,
restarts by reason, start latency, reconcile pass duration), run-health incidents and the
notification outbox."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from tbhub.core.models import ObservedState, RestartReason
from tbhub.health.incidents import open_totals
from tbhub.health.notify.outbox import delivery_totals
from tbhub.housekeeping.backup import last_runs, recovery_point_age
from tbhub.housekeeping.trash import trash_totals
from tbhub.http.deps import ContextDep, SessionDep
from tbhub.supervisor.board_settings import board_rows
from tbhub.supervisor.metrics import board_lines, incident_lines, notify_lines

router = APIRouter(tags=["health"])


def metrics_text(session: SessionDep, now: float) -> str:
    lines: list[str] = []

    def gauge(name: str, help_text: str, value: float | None) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        if value is not None:  # no sample at all until there is something to report
            lines.append(f"{name} {value:.3f}".rstrip("0").removesuffix("."))

    last, good = last_runs(session)
    good_at = good.finished_at.timestamp() if good and good.finished_at else None
    gauge("tbhub_backup_last_complete_timestamp_seconds",
          "When the newest complete snapshot finished (Unix time).", good_at)  # fmt: skip
    gauge("tbhub_backup_last_complete_age_seconds",
          "Seconds since the newest complete snapshot finished: the recovery point.",
          recovery_point_age(good, now))  # fmt: skip
    gauge("tbhub_backup_last_run_success",
          "1 if the last backup run completed, 0 if it failed.",
          (1 if last.state == "complete" else 0) if last else None)  # fmt: skip
    gauge("tbhub_backup_last_run_timestamp_seconds", "When the last backup run ended.",
          last.finished_at.timestamp() if last and last.finished_at else None)  # fmt: skip
    count, size = trash_totals(session)
    gauge("tbhub_trash_runs", "Runs in the trash.", count)
    gauge("tbhub_trash_bytes", "Bytes in the trash.", size)
    return "\n".join(lines) + "\n"


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(session: SessionDep, context: ContextDep) -> PlainTextResponse:
    boards = board_lines(
        board_rows(session, context.settings),
        states=[s.value for s in ObservedState],
        reasons=[r.value for r in RestartReason],
        budget=context.settings.memory_budget_bytes,
    )
    incidents = incident_lines(*open_totals(session))
    deliveries = notify_lines(*delivery_totals(session, datetime.now(UTC)))
    lines = [*boards, *incidents, *deliveries, *context.board_metrics.lines()]
    text = metrics_text(session, time.time()) + "\n".join(lines)
    return PlainTextResponse(text + "\n", media_type="text/plain; version=0.0.4")
