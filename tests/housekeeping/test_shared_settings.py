"""Settings the server and the CLI must agree on come from the server's record: a command
takes those it does not set, and refuses one it sets otherwise, naming both values."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.core.models import BackupRun
from tbhub.core.settings import Settings
from tbhub.serve.shared_settings import record
from tests.conftest import TEST_SECRET
from tests.housekeeping.conftest import fill_storage

runner = CliRunner()


@pytest.fixture(autouse=True)
def servers_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands get the key the test's server settings have, as its environment would."""
    monkeypatch.setenv("TBHUB_SECRET_KEY", TEST_SECRET)


def backup_runs(factory: sessionmaker[Session]) -> int:
    with factory() as session:
        return int(session.scalar(select(func.count()).select_from(BackupRun)) or 0)


def test_a_backup_to_a_target_the_server_does_not_know_is_refused_naming_both_values(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str,
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    record(jobs_settings, now=time.time())  # the server runs without a backup target
    fill_storage(jobs_settings, runs=1)
    elsewhere = tmp_path / "cli-only-backups"
    monkeypatch.setenv("TBHUB_BACKUP_TARGET", str(elsewhere))
    for command in (["admin", "backup", "run"], ["admin", "backup", "list"]):
        result = runner.invoke(app, command)
        assert result.exit_code == 1
        assert (f"error: this command and `tbhub serve` disagree: TBHUB_BACKUP_TARGET is "
                f"'{elsewhere}' here but unset for the server") in result.stderr  # fmt: skip
        assert "serve-settings.json" in result.stderr and "restart it" in result.stderr
    assert not elsewhere.exists() and backup_runs(factory) == 0
    code = json.loads(runner.invoke(app, ["admin", "backup", "run", "--json"]).stdout)
    assert code["error"]["code"] == "settings_disagree"


def test_a_command_takes_the_shared_settings_it_does_not_set_from_the_server(
    factory: sessionmaker[Session], jobs_settings: Settings, project: str,
    cli_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    target = tmp_path / "server-backups"
    jobs_settings.backup_target = str(target)
    record(jobs_settings, now=time.time())
    monkeypatch.delenv("TBHUB_BACKUP_TARGET", raising=False)
    fill_storage(jobs_settings, runs=1)
    result = runner.invoke(app, ["admin", "backup", "run", "--json"])
    assert result.exit_code == 0, result.stderr
    assert (target / json.loads(result.stdout)["snapshot"] / "vision").is_dir()


def test_a_command_on_another_database_than_the_server_is_refused_without_its_password(
    jobs_settings: Settings, cli_env: dict[str, str]
) -> None:
    server = jobs_settings.model_copy(
        update={"database_url": "postgresql+psycopg://tbhub:s3cret-pw@db.example.org/tbhub"}
    )
    record(server, now=time.time())
    result = runner.invoke(app, ["admin", "user", "list"])
    assert result.exit_code == 1
    ours = make_url(jobs_settings.db_url).render_as_string(hide_password=True)
    theirs = "postgresql+psycopg://tbhub:***@db.example.org/tbhub"
    assert f"TBHUB_DATABASE_URL is '{ours}' here but '{theirs}' for the server" in result.stderr
    assert "s3cret-pw" not in result.stderr + record_text(jobs_settings)


def record_text(settings: Settings) -> str:
    return (settings.data_dir / "serve-settings.json").read_text()


def test_a_command_with_another_secret_key_than_the_server_is_refused_and_makes_none(
    jobs_settings: Settings, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    record(jobs_settings, now=time.time())
    monkeypatch.setenv("TBHUB_SECRET_KEY", "another-key-" + "y" * 40)
    result = runner.invoke(app, ["nginx", "render"])
    assert result.exit_code == 1
    assert "TBHUB_SECRET_KEY (fingerprint) is '" in result.stderr
    assert "for the server" in result.stderr and TEST_SECRET not in result.stderr
    monkeypatch.delenv("TBHUB_SECRET_KEY")  # none here: the data dir's key is not made
    result = runner.invoke(app, ["nginx", "render"])
    assert result.exit_code == 1 and "(fingerprint) is unset here" in result.stderr
    assert not (jobs_settings.data_dir / "secret_key").exists()
    assert not (jobs_settings.data_dir / "nginx").exists()
