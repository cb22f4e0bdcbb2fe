"""`tbhub admin replicas`: which `tbhub serve` runs the supervisor, and which stand by."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from rich.table import Table
from sqlalchemy.engine import make_url

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    handle_errors,
    out_console,
    runtime_settings,
)
from tbhub.leader_lock import list_replicas
from tbhub.locks import LockHeld, hold_lock
from tbhub.settings import Settings


def sqlite_status(settings: Settings) -> list[dict[str, Any]]:
    """On SQLite the one server is the leader; it holds the data dir's lock."""
    try:
        hold_lock(settings.data_dir / "serve.lock").close()
    except LockHeld as held:
        return [{"replica": f"pid {held.holder} on {settings.data_dir}", "leader": True,
                 "connected_at": None}]  # fmt: skip
    return []


def postgresql_status(settings: Settings) -> list[dict[str, Any]]:
    with db_session(settings) as session:
        rows = list_replicas(session)
    return [
        {
            "replica": row.address,
            "leader": row.leader,
            "connected_at": row.connected_at.astimezone(UTC)
            .isoformat(timespec="seconds")
            .replace("+00:00", "Z"),
        }
        for row in rows
    ]


@handle_errors
def replicas(as_json: bool = JsonOption) -> None:
    """The `tbhub serve` replicas on this database; the leader runs the supervisor and jobs."""
    settings = runtime_settings()
    database = make_url(settings.db_url).get_backend_name()
    rows = postgresql_status(settings) if database == "postgresql" else sqlite_status(settings)
    leader = next((row["replica"] for row in rows if row["leader"]), None)
    result = {"database": database, "leader": leader, "replicas": rows}

    def human() -> None:
        if not rows:
            out_console.print("no `tbhub serve` is running on this database")
            return
        table = Table("replica", "role", "connected since")
        for row in rows:
            role = "leader (supervisor, jobs)" if row["leader"] else "standby"
            table.add_row(row["replica"], role, row["connected_at"] or "-")
        out_console.print(table)
        if leader is None:
            out_console.print("no leader right now: a standby takes over within seconds")

    emit(result, as_json=as_json, human=human)
