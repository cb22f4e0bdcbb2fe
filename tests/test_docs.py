"""The README documents every setting and every CLI command the code has."""

from __future__ import annotations

import collections
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from tbhub.cli.main import app
from tbhub.core.settings import Settings

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


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def http_table_entries() -> list[tuple[str | None, str]]:
    """(method or None for a page, path as written) for each route the first column of the
    README's HTTP table names, `…/x` read against the row's (or the last row's) full path."""
    section = README.split("### HTTP interface", 1)[1].split("\n### ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]
    entries: list[tuple[str | None, str]] = []
    base = ""
    for row in rows:
        methods: list[str] = []
        for span in re.findall(r"`([^`]+)`", row.split(" | ", 1)[0]):
            if span in HTTP_METHODS:
                methods.append(span)
                continue
            method, _, path = span.rpartition(" ") if " " in span else ("", "", span)
            if not path.startswith(("/", "…/")) or method not in ("", *HTTP_METHODS):
                methods = []
                continue
            path = re.split(r"[?\[]", path, maxsplit=1)[0]
            if path.startswith("…"):
                first = path.split("/")[1]
                cut = base.find(f"/{first}")
                path = (base[:cut] if cut > 0 else base.rsplit("/", 1)[0]) + path[1:]
            else:
                base = path
            entries += [(m, path) for m in ([*methods, method] if method else methods or [None])]
            methods = []
    return entries


def app_routes() -> set[tuple[str, str]]:
    """(method, path with {} for each parameter) of every route of the app, hidden too."""
    from tbhub.core.settings import prepare_runtime
    from tbhub.serve.app import build_context, create_app
    from tests.test_input_bounds import full_spec

    with tempfile.TemporaryDirectory() as tmp:
        settings = prepare_runtime(Settings(data_dir=Path(tmp), secret_key="k" * 32))
        app = create_app(build_context(settings))
        spec = full_spec(app)
    # The spec's routes, and the app's own (the OpenAPI document is not in itself).
    paths = [(m, path) for path, operations in spec["paths"].items() for m in operations]
    paths += [(m, r.path) for r in app.routes for m in getattr(r, "methods", None) or ()]
    return {(method.upper(), re.sub(r"\{[^}]+\}", "{}", path)) for method, path in paths}


def route_matches(documented: tuple[str | None, str], route: tuple[str, str]) -> bool:
    method, path = documented
    pattern = re.sub(r"<[^>]+>", "{}", path).rstrip("/") or "/"
    if method is not None and method != route[0]:
        return False
    parts, route_parts = pattern.split("/"), (route[1].rstrip("/") or "/").split("/")
    return len(parts) == len(route_parts) and all(
        p == r or r == "{}" for p, r in zip(parts, route_parts, strict=True)
    )


def test_the_http_table_names_each_route_once() -> None:
    entries = [e for e in http_table_entries() if e[0] is not None]
    assert len(entries) > 40
    assert [e for e, n in collections.Counter(entries).items() if n > 1] == []


def test_the_http_table_lists_exactly_the_apps_api_routes() -> None:
    documented, routes = http_table_entries(), app_routes()
    assert [e for e in documented if not any(route_matches(e, r) for r in routes)] == []
    api = {r for r in routes if r[1].startswith("/api/") and r[0] != "HEAD"}
    assert [r for r in sorted(api) if not any(route_matches(e, r) for e in documented)] == []
