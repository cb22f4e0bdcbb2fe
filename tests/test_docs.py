"""The README documents every setting and every CLI command the code has."""

from __future__ import annotations

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
