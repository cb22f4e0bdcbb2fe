"""The README documents every setting and every CLI command the code has."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from tbhub.cli.main import app
from tbhub.settings import Settings

README = (Path(__file__).parents[1] / "README.md").read_text()


def command_paths(command: Any, prefix: str = "tbhub") -> list[str]:
    # typer vendors its own click, so test for a group by shape rather than by class.
    if hasattr(command, "commands"):
        paths = []
        for name, sub in command.commands.items():
            paths.extend(command_paths(sub, f"{prefix} {name}"))
        return paths
    return [prefix]


def test_every_setting_is_in_the_configuration_table() -> None:
    missing = [name for name in Settings.model_fields if f"`TBHUB_{name.upper()}`" not in README]
    assert missing == []


def test_every_setting_has_a_description() -> None:
    assert [n for n, f in Settings.model_fields.items() if not f.description] == []


def test_every_cli_command_is_in_the_readme() -> None:
    paths = command_paths(typer.main.get_command(app))
    assert len(paths) >= 9
    missing = [path for path in paths if f"`{path}" not in README]
    assert missing == []


def every_command(command: Any, path: str = "tbhub") -> Iterator[tuple[str, Any]]:
    """(path, command) for the root, every group and every command below it."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from every_command(sub, f"{path} {name}")


def test_every_group_command_and_option_has_help_text() -> None:
    commands = dict(every_command(typer.main.get_command(app)))
    assert {"tbhub admin", "tbhub admin token", "tbhub admin token list"} <= set(commands)
    assert [path for path, c in commands.items() if not (c.help or "").strip()] == []
    no_help = [
        f"{path} {p.opts[0]}"
        for path, c in commands.items()
        for p in c.params
        if p.param_type_name == "option" and not p.hidden and not (p.help or "").strip()
    ]
    assert no_help == []


def test_each_groups_help_names_every_group_it_holds() -> None:
    """`tbhub admin --help` starts with one line that says what is inside."""
    for path, command in every_command(typer.main.get_command(app)):
        groups = [name for name, sub in getattr(command, "commands", {}).items()
                  if hasattr(sub, "commands")]  # fmt: skip
        if path != "tbhub":  # the root lists its commands; its line says what tbhub is
            words = {w.strip(".,:;") for w in command.help.lower().split()}
            unnamed = [
                g
                for g in groups
                if not all(any(w.startswith(part) for w in words) for part in g.split("-"))
            ]
            assert unnamed == [], path
