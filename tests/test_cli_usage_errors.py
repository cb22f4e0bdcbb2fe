"""Usage errors in every command follow the one CLI style: `error: ...` on stderr and exit 1,
or the JSON error shape on stdout with --json; never typer's boxed panel and exit 2."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import typer

from tbhub.cli.main import app, main
from tests.test_docs import command_paths

COMMANDS = sorted(tuple(p.split()[1:]) for p in command_paths(typer.main.get_command(app)))


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def takes_json(path: tuple[str, ...]) -> bool:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return any("--json" in p.opts for p in command.params)


def test_the_cli_has_the_commands_this_test_walks() -> None:
    assert ("admin", "retention", "set") in COMMANDS and len(COMMANDS) > 20


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_an_unknown_option_is_an_error_in_the_one_style(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*path, "--no-such-option"], capsys)
    assert code == 1
    assert err.startswith("error: No such option: --no-such-option")
    assert f"see `tbhub {' '.join(path)} --help`" in err
    assert "╭" not in err + out
    if takes_json(path):
        code, out, err = run([*path, "--no-such-option", "--json"], capsys)
        assert code == 1 and err == ""
        error = json.loads(out)["error"]
        assert error["code"] == "usage" and "--no-such-option" in error["message"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["admin", "retention", "set", "vision", "--max-project-bytes", "abc"],
         "error: Invalid value for '--max-project-bytes'"),
        (["admin", "retention", "pin"], "error: Missing argument 'project'"),
        (["admin", "no-such-group"], "error: No such command 'no-such-group'"),
        (["admin", "trash", "purge", "--older-than", "soon"],
         "error: Invalid value for '--older-than'"),
    ],
)  # fmt: skip
def test_bad_values_and_missing_arguments_are_errors_in_the_one_style(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(args, capsys)
    assert code == 1 and err.startswith(expected) and out == ""
    code, out, _ = run([*args, "--json"], capsys)
    assert code == 1 and json.loads(out)["error"]["code"] == "usage"


def test_a_group_without_a_command_prints_its_help_and_succeeds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["admin"], capsys)
    assert code == 0 and "Usage: tbhub admin" in out and err == ""


def test_version_is_the_installed_package_version_in_text_and_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    expected = pyproject["project"]["version"]
    code, out, err = run(["--version"], capsys)
    assert (code, out, err) == (0, f"tbhub {expected}\n", "")
    code, out, _ = run(["--version", "--json"], capsys)
    assert code == 0 and json.loads(out) == {"version": expected}


def test_json_before_the_command_is_a_usage_error_that_says_where_it_goes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(["--json", "admin", "user", "list"], capsys)
    assert code == 1 and err == ""
    error = json.loads(out)["error"]
    assert error["code"] == "usage" and "goes after the command" in error["message"]


def test_a_bad_serve_flag_stops_before_anything_starts_with_an_error_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "absent.toml"))
    data_dir = tmp_path / "data"
    for args, expected in (
        (["--port", "70000"], "error: --port: Input should be less than or equal to 65535"),
        (["--port", "http"], "error: Invalid value for '--port'"),
        (["--public-url", "tbhub.example.org"], "error: --public-url: 'tbhub.example.org' is"),
        (["--host", "0.0.0.0:80"], "error: --host: '0.0.0.0:80' is not an IP address"),
    ):
        code, out, err = run(["serve", "--data-dir", str(data_dir), *args], capsys)
        assert (code, out) == (1, "") and err.startswith(expected), err
    assert not data_dir.exists()
