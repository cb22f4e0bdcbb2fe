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

ROOT: Any = typer.main.get_command(app)
COMMANDS = sorted(tuple(p.split()[1:]) for p in command_paths(ROOT))


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(args)
    out, err = capsys.readouterr()
    return int(exited.value.code or 0), out, err


def command_at(path: tuple[str, ...]) -> Any:
    command = ROOT
    for name in path:
        command = command.commands[name]
    return command


def takes_json(path: tuple[str, ...]) -> bool:
    return any("--json" in p.opts for p in command_at(path).params)


def is_number(param: Any) -> bool:
    annotation = param.type_descriptor.annotation
    return any(t in (int, float) for t in getattr(annotation, "__args__", (annotation,)))


def usage_error(path: tuple[str, ...], kind: str) -> tuple[list[str], str] | None:
    """Arguments that make this kind of usage error on the command, and how its message
    starts; None where the command has no place for it. Everything else on the line is
    right, so this is the one error (and the command never runs)."""
    params = [p for p in command_at(path).params if p.name != "help"]
    options = [p for p in params if p.param_type_name == "option"]
    arguments = [p for p in params if p.param_type_name == "argument"]

    def fill(param: Any) -> str:
        return "1" if is_number(param) else "x"

    required = [w for o in options if o.required for w in (o.opts[0], fill(o))]
    positional = [fill(a) for a in arguments if a.required]
    every_positional = [fill(a) for a in arguments]  # optional ones too: nothing left to fill
    valued = [o for o in options if not o.is_flag and not o.required]
    numbers = [o for o in valued if is_number(o)]
    if kind == "unknown option":
        return [*path, "--no-such-option", *required, *positional], "No such option"
    if kind == "missing argument" and positional:
        return [*path, *required], "Missing argument"
    if kind == "missing option" and required:
        return [*path, *positional], "Missing option"
    if kind == "option without its value" and valued:
        return [*path, *required, valued[0].opts[0]], "Option"  # ... requires an argument
    if kind == "not a number" and numbers:
        return [*path, numbers[0].opts[0], "abc", *required, *positional], "Invalid value"
    if kind == "extra argument" and all(a.nargs == 1 for a in arguments):
        return [*path, *required, *every_positional, "extra"], "Got unexpected extra argument"
    return None


KINDS = ("unknown option", "missing argument", "missing option", "option without its value",
         "not a number", "extra argument")  # fmt: skip
CASES = [(path, kind) for kind in KINDS for path in COMMANDS if usage_error(path, kind)]


def test_the_cli_has_the_commands_and_the_kinds_of_error_this_test_walks() -> None:
    assert ("admin", "retention", "set") in COMMANDS and len(COMMANDS) > 20
    assert {kind for _, kind in CASES} == set(KINDS)


@pytest.mark.parametrize(("path", "kind"), CASES, ids=[f"{' '.join(p)}: {k}" for p, k in CASES])
def test_every_kind_of_usage_error_is_in_the_one_style_and_json_with_json(
    path: tuple[str, ...], kind: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.delenv("TBHUB_PROJECT", raising=False)  # it would fill in --project
    monkeypatch.setenv("TBHUB_DATA_DIR", str(tmp_path / "data"))  # should a command run
    case = usage_error(path, kind)
    assert case is not None
    args, start = case
    code, out, err = run(args, capsys)
    assert (code, out) == (1, "") and err.startswith(f"error: {start}"), err
    assert err.rstrip().endswith(f"; see `tbhub {' '.join(path)} --help`"), err
    assert "╭" not in err and not (tmp_path / "data").exists()
    # --json anywhere on tbhub's part of the line: the JSON shape on stdout, nothing on stderr.
    code, out, err = run([*path, "--json", *args[len(path) :]], capsys)
    assert (code, err) == (1, "")
    error = json.loads(out)["error"]
    assert error["code"] == "usage"
    if takes_json(path):  # the same error (elsewhere: --json is the unknown option)
        assert error["message"].startswith(start)


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
