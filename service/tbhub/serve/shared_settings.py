"""The settings `tbhub serve` and the CLI must agree on, taken from one place: the server.

`tbhub serve` records the values it runs with in `<data_dir>/serve-settings.json` when it
starts. A CLI command on that data dir takes each of them it does not set itself, and
refuses one it sets to something else, naming both values and the fix: a backup taken to a
target the server does not know left the server saying "No backup target" while /metrics
counted the backup, and retention or board limits read from a second set of settings would
act on, or show, something the server does not.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from tbhub.core.errors import ConfigError, SettingsDisagree
from tbhub.core.leader_lock import key_fingerprint
from tbhub.core.settings import Settings, load_settings
from tbhub.core.timestamps import iso_utc
from tbhub.core.values import format_value

RECORD_NAME = "serve-settings.json"
# Where the runs, trash, archives, compare views and backups are, and the policies the
# server's jobs and pages apply: what a command must not see differently.
SHARED = (
    "storage_root",
    "trash_root",
    "archive_root",
    "compare_root",
    "backup_target",
    "backup_keep_daily",
    "backup_keep_weekly",
    "backup_ssh_command",
    "backup_rsync_args",
    "retention_max_age_days",
    "retention_keep_last",
    "retention_max_project_bytes",
    "retention_action",
    "retention_active_minutes",
    "trash_grace_days",
    "board_memory_limit",
)
# The database is compared, never taken: its URL may hold a password, which is not written.
DATABASE = "database"
# The secret key, by a fingerprint that reveals nothing of it: compared once the command has
# its own (a config nginx is given, `tbhub nginx render`, proves its hop with it).
SECRET = "secret_key_fingerprint"


def record_path(settings: Settings) -> Path:
    return settings.data_dir / RECORD_NAME


def shared_values(settings: Settings) -> dict[str, Any]:
    """The shared settings as JSON values (paths as text), and the database without its
    password."""
    values = {name: getattr(settings, name) for name in SHARED}
    values[DATABASE] = make_url(settings.db_url).render_as_string(hide_password=True)
    secret = settings.secret_key
    values[SECRET] = key_fingerprint(secret.get_secret_value()) if secret else None
    return json.loads(json.dumps(values, default=str))  # type: ignore[no-any-return]


def record(settings: Settings, *, now: float) -> Path:
    """Write what this server runs with (atomically: a command never reads half of it)."""
    path = record_path(settings)
    tmp = path.with_name(f".{RECORD_NAME}.{os.getpid()}.tmp")
    data = {"recorded_at": iso_utc(now), "pid": os.getpid(), "settings": shared_values(settings)}
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def read_record(settings: Settings) -> dict[str, Any] | None:
    """The server's record on this data dir; None before any `tbhub serve` ran there."""
    path = record_path(settings)
    try:
        data = json.loads(path.read_text())
        return {"recorded_at": str(data["recorded_at"]), "settings": dict(data["settings"])}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot read {path} ({exc}), where `tbhub serve` records its settings; start "
            "`tbhub serve` again to rewrite it"
        ) from None


def variable(name: str) -> str:
    special = {DATABASE: "TBHUB_DATABASE_URL", SECRET: "TBHUB_SECRET_KEY (fingerprint)"}
    return special.get(name, f"TBHUB_{name.upper()}")


def _shown(value: Any) -> str:
    return "unset" if value in (None, "") else repr(format_value(value))


def agree_with_server(settings: Settings) -> Settings:
    """`settings` with each shared value the command does not set taken from the server's
    record; SettingsDisagree when it sets one to another value (or is on another database)."""
    recorded = read_record(settings)
    if recorded is None:
        return settings
    theirs, ours = recorded["settings"], shared_values(settings)
    given = settings.given
    differ = [
        name for name in (*SHARED, DATABASE)
        if name in theirs and ours[name] != theirs[name] and (name in given or name == DATABASE)
    ]  # fmt: skip
    _refuse(settings, recorded, ours, differ)
    taken = {name: theirs[name] for name in SHARED if name in theirs and ours[name] != theirs[name]}
    return load_settings(**taken) if taken else settings


def agree_on_secret(settings: Settings) -> Settings:
    """SettingsDisagree when the command's secret key (its own, else the data dir's) is not
    the one the server runs with: checked before a command would make the data dir's."""
    recorded = read_record(settings)
    theirs = recorded["settings"].get(SECRET) if recorded else None
    if recorded is None or theirs is None:
        return settings
    key = settings.secret_key.get_secret_value() if settings.secret_key else None
    stored = settings.data_dir / "secret_key"
    if key is None and stored.is_file():
        key = stored.read_text().strip()
    ours = key_fingerprint(key) if key else None
    _refuse(settings, recorded, {SECRET: ours}, [SECRET] if ours != theirs else [])
    return settings


def _refuse(settings: Settings, recorded: dict[str, Any], ours: dict[str, Any],
            differ: list[str]) -> None:  # fmt: skip
    theirs = recorded["settings"]
    if differ:
        lines = "; ".join(
            f"{variable(name)} is {_shown(ours[name])} here but {_shown(theirs[name])} for the "
            "server"
            for name in differ
        )
        raise SettingsDisagree(
            f"this command and `tbhub serve` disagree: {lines} (the server's settings as it "
            f"recorded them in {record_path(settings)} when it started at "
            f"{recorded['recorded_at']}). Give the command the server's settings (its "
            "environment file or tbhub.toml), or change the server's and restart it"
        )
