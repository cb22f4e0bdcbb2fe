"""`tbhub admin replicas`: which `tbhub serve` runs the supervisor, and which stand by."""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import make_url

from tbhub.cli.common import (
    JsonOption,
    db_session,
    emit,
    handle_errors,
    out_console,
    print_table,
    runtime_settings,
    time_column,
)
from tbhub.core.leader_lock import list_replicas
from tbhub.core.locks import LockHeld, hold_lock
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc


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
            "connected_at": iso_utc(row.connected_at),
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
        print_table(
            ("replica", "role", time_column("connected since")),
            [(row["replica"], "leader (supervisor, jobs)" if row["leader"] else "standby",
              row["connected_at"] or "-") for row in rows],
            empty="no `tbhub serve` is running on this database; start one with `tbhub serve`",
        )  # fmt: skip
        if rows and leader is None:
            out_console.print("no leader right now: a standby takes over within seconds")

    emit(result, as_json=as_json, human=human)
