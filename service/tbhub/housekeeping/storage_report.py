"""What the storage holds, for the admin console and GET /api/v1/storage: bytes and runs per
project against its quota, the free space of the storage's filesystem, and the trash."""

from __future__ import annotations

import shutil
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from tbhub.core.models import Project, Role
from tbhub.core.settings import Settings
from tbhub.domain.overview import summarize_projects
from tbhub.domain.retention_policy import default_policy
from tbhub.housekeeping.trash import trash_totals
from tbhub.storage.usage import ProjectUsage


def storage_report(session: Session, settings: Settings, usage: ProjectUsage) -> dict[str, Any]:
    """Projects largest first, read as the projects page reads them (overview.py): bytes
    from the storage watcher's running totals (else the registry's), present runs, and the
    quota, the effective retention `max_project_bytes` (null: none)."""
    projects: list[tuple[Project, Role | None]] = [(p, None) for p in session.scalars(
        select(Project).options(selectinload(Project.board)))]  # fmt: skip
    summaries = summarize_projects(session, projects, default_policy=default_policy(settings),
                                   usage=usage)  # fmt: skip
    rows = [{"project": s.name, "bytes": s.bytes_used, "runs": s.run_total,
             "quota_bytes": s.quota} for s in summaries]  # fmt: skip
    disk = shutil.disk_usage(settings.storage)
    filesystem = {"total_bytes": disk.total, "used_bytes": disk.used, "free_bytes": disk.free}
    trashed, trash_bytes = trash_totals(session)
    return {
        "root": str(settings.storage),
        "filesystem": filesystem,
        "trash": {"runs": trashed, "bytes": trash_bytes},
        "projects_bytes": sum(r["bytes"] for r in rows),
        "projects": sorted(rows, key=lambda r: (-r["bytes"], r["project"])),
    }
