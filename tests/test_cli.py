"""The `tbhub` CLI in-process: admin commands, JSON output and the one error style."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.core.db import make_engine, make_session_factory, transaction
from tbhub.core.locks import hold_lock
from tbhub.core.settings import Settings
from tbhub.domain.users import authenticate
from tests.test_docs import command_paths
from tests.times import assert_one_format

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


def test_admin_commands_need_a_migrated_database(
    empty_database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TBHUB_DATABASE_URL", empty_database_url)
    monkeypatch.setenv("TBHUB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "absent.toml"))
    if empty_database_url.startswith("sqlite:///"):  # a file that is there, without tables
        Path(empty_database_url.removeprefix("sqlite:///")).touch()
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
    assert str(conf) in out and "location = /_auth/board {" in conf.read_text()


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


def test_every_time_the_cli_prints_is_iso_8601_utc_with_z(cli_env: Settings) -> None:
    tbhub("db", "upgrade")
    tbhub("admin", "user", "create", "alice", "--password-stdin", stdin="pw-long-enough\n")
    tbhub("admin", "project", "create", "vision", "--owner", "alice")
    made = json.loads(tbhub("admin", "token", "create", "--user", "alice", "--project",
                            "vision", "--expires-days", "30", "--json")[1])  # fmt: skip
    assert_one_format(made, {"created_at", "expires_at"})
    revoked = json.loads(tbhub("admin", "token", "revoke", str(made["id"]), "--json")[1])
    assert_one_format(revoked, {"created_at", "expires_at", "revoked_at"})
    link = json.loads(tbhub("admin", "share", "create", "vision", "--json")[1])
    assert_one_format(link, {"created_at", "expires_at"})
    listings = {
        ("admin", "token", "list"): ("expires_at",),
        ("admin", "share", "list", "vision"): ("expires_at",),
        ("admin", "audit", "list"): ("at",),
    }
    for command, keys in listings.items():
        code, out, _ = tbhub(*command, "--json")
        assert code == 0
        [first, *_] = rows = json.loads(out)
        assert_one_format(rows, set(keys))
        code, table, _ = tbhub(*command)  # the table shows the same strings, whole
        assert code == 0 and all(first[key] in table for key in keys), table


EMPTY_LISTS = {
    ("admin", "user", "list"): "no users yet; create one with `tbhub admin user create",
    ("admin", "project", "list"): "no projects yet; create one with",
    ("admin", "board", "list"): "no boards yet",
    ("admin", "token", "list"): "no tokens yet; create one with `tbhub admin token create",
    ("admin", "team", "list"): "no teams yet; create one with",
    ("admin", "audit", "list"): "no audit events yet",
    ("admin", "trash", "list"): "the trash is empty",
    ("admin", "retention", "plan"): "no projects yet, so nothing to plan",
    ("admin", "backup", "list"): "no snapshots on ",
    ("admin", "plugins", "list"): "no extra plugins installed; list them in TBHUB_BOARD_PLUGINS",
    ("admin", "replicas"): "no `tbhub serve` is running on this database; start one",
    ("runs", "list"): "",  # over the API: tests/e2e/test_training_jobs.py
    ("projects", "list"): "",  # over the API: tests/e2e/test_training_jobs.py
    ("views", "list"): "",  # over the API: tests/e2e/test_views.py
    ("alerts", "list"): "",  # over the API: tests/health/test_incidents_api.py
    ("admin", "share", "list"): "",  # needs a project: below
}


def test_the_cases_below_cover_every_list_command() -> None:
    paths = {tuple(p.split()[1:]) for p in command_paths(typer.main.get_command(app))}
    assert {p for p in paths if p[-1] in ("list", "plan", "replicas")} == set(EMPTY_LISTS)


def test_an_empty_list_says_so_and_what_to_do_instead_of_an_empty_table(
    cli_env: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TBHUB_BACKUP_TARGET", str(tmp_path / "backups"))
    tbhub("db", "upgrade")
    for command, message in EMPTY_LISTS.items():
        if message:
            code, out, err = tbhub(*command)
            assert (code, err) == (0, "") and out.startswith(message), (command, out)
    assert json.loads(tbhub("admin", "user", "list", "--json")[1]) == []  # programs get JSON
    tbhub("admin", "project", "create", "vision")
    code, out, _ = tbhub("admin", "share", "list", "vision")
    assert out.startswith("vision has no share links yet; create one with `tbhub admin share")
    code, out, _ = tbhub("admin", "audit", "list", "--action", "no.such")
    assert out.startswith("no audit events match; try fewer filters")
    code, out, _ = tbhub("admin", "token", "list", "--project", "vision")
    assert out.startswith("no tokens match")
