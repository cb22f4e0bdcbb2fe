"""The `tbhub` CLI in-process: admin commands, JSON output and the one error style."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.db import make_engine, make_session_factory, transaction
from tbhub.locks import hold_lock
from tbhub.settings import Settings
from tbhub.users import authenticate

runner = CliRunner()


@pytest.fixture
def cli_env(settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TBHUB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("TBHUB_STORAGE_ROOT", str(settings.storage))
    monkeypatch.setenv("TBHUB_DATABASE_URL", settings.db_url)
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "absent.toml"))
    return settings


def tbhub(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_admin_commands_need_a_migrated_database(cli_env: Settings) -> None:
    code, _, err = tbhub("admin", "user", "list")
    assert code == 1
    assert "run `tbhub db upgrade` first" in err


def test_user_project_and_membership_from_the_cli(cli_env: Settings) -> None:
    assert tbhub("db", "upgrade")[0] == 0
    assert (
        tbhub(
            "admin",
            "user",
            "create",
            "alice",
            "--admin",
            "--password-stdin",
            stdin="pw-long-enough\n",
        )[0]
        == 0
    )
    assert (
        tbhub("admin", "user", "create", "bob", "--password-stdin", stdin="pw-long-enough\n")[0]
        == 0
    )
    code, out, _ = tbhub("admin", "project", "create", "vision", "--owner", "alice", "--json")
    assert code == 0
    assert json.loads(out) == {
        "name": "vision",
        "owner": "alice",
        "logdir": str(cli_env.storage / "vision"),
    }
    assert (cli_env.storage / "vision").is_dir()
    assert tbhub("admin", "project", "add-member", "vision", "bob", "--role", "viewer")[0] == 0

    code, out, _ = tbhub("admin", "user", "list", "--json")
    assert json.loads(out) == [
        {"name": "alice", "is_admin": True},
        {"name": "bob", "is_admin": False},
    ]
    code, out, _ = tbhub("admin", "project", "list", "--json")
    assert json.loads(out) == [{"name": "vision", "board": "stopped", "members": 2}]
    code, out, _ = tbhub("admin", "board", "status", "vision", "--json")
    board = json.loads(out)
    assert (board["desired"], board["observed"], board["failures"]) == ("stopped", "stopped", 0)
    code, out, _ = tbhub("admin", "board", "list", "--json")
    assert [b["project"] for b in json.loads(out)] == ["vision"]


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (("admin", "project", "create", "Bad_Name"), None, "is not a slug"),
        (("admin", "project", "create", "p", "--owner", "ghost"), None, "no user named 'ghost'"),
        (
            ("admin", "project", "add-member", "nope", "alice", "--role", "viewer"),
            None,
            "no project named 'nope'",
        ),
        (
            ("admin", "project", "add-member", "p0", "alice", "--role", "boss"),
            None,
            "role 'boss' is not one of",
        ),
        (("admin", "user", "create", "carol"), None, "--password-stdin"),
        (
            ("admin", "user", "create", "carol", "--password-stdin"),
            "\n",
            "no password on standard input",
        ),
        (("admin", "user", "create", "carol", "--password-stdin"), "short\n", "too short"),
        (
            ("admin", "user", "create", "alice", "--password-stdin"),
            "pw-long-enough\n",
            "already exists",
        ),
    ],
)
def test_bad_input_gets_one_clear_error_and_changes_nothing(
    cli_env: Settings, args: tuple[str, ...], stdin: str | None, message: str
) -> None:
    tbhub("db", "upgrade")
    tbhub("admin", "user", "create", "alice", "--password-stdin", stdin="pw-long-enough\n")
    tbhub("admin", "project", "create", "p0")
    before = (
        tbhub("admin", "project", "list", "--json")[1],
        tbhub("admin", "user", "list", "--json")[1],
    )
    code, out, err = tbhub(*args, stdin=stdin)
    assert code == 1
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in out + err
    after = (
        tbhub("admin", "project", "list", "--json")[1],
        tbhub("admin", "user", "list", "--json")[1],
    )
    assert after == before


def test_errors_are_json_with_the_json_flag(cli_env: Settings) -> None:
    tbhub("db", "upgrade")
    code, out, _ = tbhub("admin", "project", "create", "Bad_Name", "--json")
    assert code == 1
    assert json.loads(out)["error"]["code"] == "invalid_input"


def test_nginx_render_writes_the_config(cli_env: Settings) -> None:
    code, out, _ = tbhub("nginx", "render")
    assert code == 0
    conf = cli_env.data_dir / "nginx" / "nginx.conf"
    assert str(conf) in out and "auth_request /_auth/board;" in conf.read_text()


def test_demo_while_another_server_holds_the_data_dir_changes_nothing(cli_env: Settings) -> None:
    assert tbhub("db", "upgrade")[0] == 0
    assert tbhub("admin", "user", "create", "admin", "--admin", "--password-stdin",
                 stdin="the-old-password\n")[0] == 0  # fmt: skip
    cli_env.data_dir.mkdir(parents=True, exist_ok=True)
    with hold_lock(cli_env.data_dir / "serve.lock"):  # as a running `tbhub serve` does
        code, out, err = tbhub("demo")
    assert code == 1
    assert "another `tbhub serve`" in err and "password" not in out
    engine = make_engine(cli_env.db_url)
    try:
        with transaction(make_session_factory(engine)) as session:
            assert authenticate(session, name="admin", password="the-old-password") is not None
    finally:
        engine.dispose()  # an undisposed PostgreSQL pool warns at a later test's collection
    assert not (cli_env.storage / "demo").exists()
