"""What the admin console reads, for instance admins: every board, the backups, the storage.

Actions have their own routes (board restart/stop/settings under /api/v1/projects/<p>/board,
accounts under /api/v1/users); these answers only read."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from tbhub.auth.caller import require_admin
from tbhub.housekeeping.backup import backup_status
from tbhub.housekeeping.storage_report import storage_report
from tbhub.http.deps import CallerDep, ContextDep, SessionDep
from tbhub.supervisor.board_settings import describe_boards

router = APIRouter(prefix="/api/v1", tags=["admin"])


@router.get("/boards")
def list_boards(caller: CallerDep, session: SessionDep, context: ContextDep) -> dict[str, Any]:
    """Every board: state, PSS against its limit, restarts by reason, last access, settings."""
    require_admin(caller, "list every board")
    return {"boards": describe_boards(session, context.settings)}


@router.get("/backups")
def get_backups(caller: CallerDep, session: SessionDep, context: ContextDep) -> dict[str, Any]:
    """The backup target, its snapshots (`listing_error` says why they could not be read),
    the last run, the last complete run and the recovery point's age in seconds."""
    require_admin(caller, "read the backups")
    return backup_status(session, context.settings, now=time.time())


@router.get("/storage")
def get_storage(caller: CallerDep, session: SessionDep, context: ContextDep) -> dict[str, Any]:
    """Bytes and runs per project (largest first) against each quota, the storage
    filesystem's total, used and free bytes, and the trash."""
    require_admin(caller, "read the storage report")
    return storage_report(session, context.settings, context.usage)
