"""Which instance a CLI command acts on: the one `tbhub serve` with the same settings runs
(TBHUB_* variables, then tbhub.toml), with the settings the server records; never a new,
empty one made where the command happens to start."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.core.settings import load_settings

runner = CliRunner()

ADMIN_COMMANDS = [
    ("admin", "user", "list"),
    ("admin", "user", "create", "alice", "--password-stdin"),
    ("admin", "project", "create", "vision"),
    ("admin", "board", "list"),
    ("admin", "retention", "plan"),
    ("admin", "backup", "list"),
    ("admin", "trash", "list"),
    ("admin", "replicas"),
    ("nginx", "render"),
]


@pytest.fixture
def tbhub_in(monkeypatch: pytest.MonkeyPatch) -> Callable[..., SimpleNamespace]:
    """tbhub_in(cwd, *args, **env): the CLI started in `cwd` with no TBHUB_* settings but
    `env`'s; its exit code, stdout and stderr."""

    def run(cwd: Path, *args: str, **env: str) -> SimpleNamespace:
        with monkeypatch.context() as patch:
            for key in [k for k in os.environ if k.upper().startswith("TBHUB_")]:
                patch.delenv(key)
            for key, value in env.items():
                patch.setenv(key, value)
            patch.chdir(cwd)
            done = runner.invoke(app, list(args), input="pw-long-enough\n")
        return SimpleNamespace(returncode=done.exit_code, stdout=done.stdout, stderr=done.stderr)

    return run


def test_admin_commands_started_where_no_instance_is_create_nothing_and_say_what_to_set(
    tmp_path: Path, tbhub_in: Callable[..., SimpleNamespace]
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in ADMIN_COMMANDS:
        done = tbhub_in(elsewhere, *command)
        assert done.returncode == 1, (command, done.stdout)
        database = elsewhere / "tbhub-data" / "tbhub.sqlite3"
        start = f"error: no tbhub instance here: its database {database} does not exist"
        assert done.stderr.startswith(start), done.stderr
        assert "TBHUB_DATA_DIR is not set" in done.stderr and "db upgrade" not in done.stderr
        assert "set TBHUB_DATA_DIR to the server's data dir" in done.stderr
        assert "directory `tbhub serve` runs in" in done.stderr
        assert list(elsewhere.iterdir()) == [], command
    # A data dir named by TBHUB_DATA_DIR that holds no instance is not made either.
    done = tbhub_in(elsewhere, "admin", "user", "list", TBHUB_DATA_DIR=str(tmp_path / "typo"))
    assert done.returncode == 1 and "comes from TBHUB_DATA_DIR)" in done.stderr
    assert not (tmp_path / "typo").exists()


def test_admin_commands_find_the_instance_by_the_settings_serve_reads(
    tmp_path: Path, tbhub_in: Callable[..., SimpleNamespace]
) -> None:
    home = tmp_path / "srv"
    home.mkdir()
    created = tbhub_in(home, "db", "upgrade")
    assert created.returncode == 0 and "created a new instance" in created.stdout
    assert tbhub_in(home, "admin", "user", "create", "alice", "--password-stdin").returncode == 0
    again = tbhub_in(home, "db", "upgrade")
    assert again.returncode == 0 and "created" not in again.stdout
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    by_variable = tbhub_in(elsewhere, "admin", "user", "list",
                           TBHUB_DATA_DIR=str(home / "tbhub-data"))  # fmt: skip
    assert by_variable.returncode == 0 and "alice" in by_variable.stdout
    (tmp_path / "tbhub.toml").write_text(f'data_dir = "{home / "tbhub-data"}"\n')
    by_file = tbhub_in(
        elsewhere, "admin", "user", "list", TBHUB_CONFIG=str(tmp_path / "tbhub.toml")
    )
    assert by_file.returncode == 0 and "alice" in by_file.stdout
    assert list(elsewhere.iterdir()) == []


def test_a_relative_backup_target_is_absolute_once_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "absent.toml"))
    for given, read in [("backups", tmp_path / "backups"), ("./b/../c", tmp_path / "b/../c"),
                        ("backup@vault:/srv/tbhub", "backup@vault:/srv/tbhub")]:  # fmt: skip
        monkeypatch.setenv("TBHUB_BACKUP_TARGET", given)
        assert load_settings().backup_target == str(read)
