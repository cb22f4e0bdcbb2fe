"""The docs site builds strictly and documents every setting, CLI command and API route the
code has. The reference pages are rendered from the code by docs/hooks/reference.py; these
tests build the site once and read what came out."""

from __future__ import annotations

import ast
import collections
import html
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from docs.hooks import reference

from tbhub.cli.main import app

REPO = Path(__file__).parents[1]
DOCS = REPO / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `mkdocs build --strict` makes it: any warning (a broken link, a page
    left out of the nav) fails the build."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr
    return out


def _text(fragment: str) -> str:
    """HTML as text: tags stripped, entities read (`&lt;project&gt;` is `<project>`)."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("¶", "").strip()


def table_rows(site: Path, page: str) -> list[list[str]]:
    """The text of each cell of each body row of every table on a built page."""
    source = (site / page).read_text()
    return [
        [_text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)]
        for row in re.findall(r"<tr>(.*?)</tr>", source, re.DOTALL)
        if "<td" in row
    ]


def headings(site: Path, page: str) -> list[str]:
    source = (site / page).read_text()
    return [_text(h) for h in re.findall(r"<h[1-6] id=[^>]*>(.*?)</h[1-6]>", source, re.DOTALL)]


def every_command(command: Any, path: str = "tbhub") -> Iterator[tuple[str, Any]]:
    """(path, command) for the root, every group and every command below it."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from every_command(sub, f"{path} {name}")


def command_paths(command: Any | None = None) -> list[str]:
    """The path of every command (`tbhub admin user create`), not of the groups; the CLI's
    tests (test_cli.py, test_cli_usage_errors.py) walk the same list."""
    root = command if command is not None else typer.main.get_command(app)
    return [path for path, sub in every_command(root) if not hasattr(sub, "commands")]


# --------------------------------------------------------------------------- settings


def test_every_setting_is_in_the_generated_settings_reference(site: Path) -> None:
    rows = {(row[0], row[1]) for row in table_rows(site, "configuration.html") if len(row) == 4}
    settings = reference.settings_class()
    missing = [n for n in settings.model_fields if (f"TBHUB_{n.upper()}", n) not in rows]
    assert missing == []


def test_every_setting_has_a_description() -> None:
    settings = reference.settings_class()
    assert [n for n, f in settings.model_fields.items() if not f.description] == []


def test_every_setting_is_explained_on_the_configuration_page() -> None:
    """The hand-written table beside the generated one goes into what a line cannot."""
    written = (DOCS / "configuration.md").read_text().split("## Settings explained", 1)[1]
    settings = reference.settings_class()
    missing = [n for n in settings.model_fields if f"`TBHUB_{n.upper()}`" not in written]
    assert missing == []


def test_the_settings_reference_has_one_group_per_declaring_class() -> None:
    groups = reference.settings_groups()
    declared = [row.toml_key for group in groups for row in group.rows]
    assert sorted(declared) == sorted(reference.settings_class().model_fields)
    assert all(group.title for group in groups)


# --------------------------------------------------------------------------- CLI


def test_every_cli_command_is_in_the_generated_cli_reference(site: Path) -> None:
    paths = [path for path, _ in every_command(typer.main.get_command(app))]
    assert len(paths) >= 9
    documented = set(headings(site, "cli.html"))
    assert [path for path in paths if path not in documented] == []


def test_every_cli_command_is_in_the_table_at_a_glance() -> None:
    glance = (DOCS / "cli.md").read_text().split("## Commands at a glance", 1)[1]
    missing = [path for path in command_paths() if f"`{path}" not in glance]
    assert missing == []


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


# --------------------------------------------------------------------------- HTTP API


def test_every_openapi_operation_is_in_the_generated_api_reference(site: Path) -> None:
    documented = {row[0] for row in table_rows(site, "http-api.html") if row}
    spec = reference.openapi_spec()
    operations = [f"{m.upper()} {path}" for path, ops in spec["paths"].items() for m in ops]
    assert len(operations) > 40
    assert [op for op in operations if op not in documented] == []


HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def http_table_entries() -> list[tuple[str | None, str]]:
    """(method or None for a page, path as written) for each route the first column of the
    HTTP API page's hand-written table names, `…/x` read against the row's (or the last
    row's) full path."""
    section = (DOCS / "http-api.md").read_text().split("## Routes and who may call them", 1)[1]
    section = section.split("\n## ", 1)[0]
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
    from tbhub.core.settings import Settings, prepare_runtime
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


# --------------------------------------------------------------------------- permissions


def test_the_permission_matrix_page_shows_every_tested_action(site: Path) -> None:
    """The page is rendered from tests/api/test_roles.py's matrix, which that test checks
    against the app for every kind of caller."""
    callers, rows = reference.permission_matrix()
    assert len(rows) > 20 and all(row.request for row in rows)
    assert all(c in reference.CALLER_NAMES for c in callers)
    shown = {tuple(cells) for cells in table_rows(site, "permissions.html")}
    expected = [(r.action, r.request, *map(str, r.statuses)) for r in rows]
    assert [row for row in expected if row not in shown] == []


def test_every_page_is_in_the_nav() -> None:
    """mkdocs --strict fails on a page left out of the nav; this names the page."""
    nav = (REPO / "mkdocs.yml").read_text()
    pages = [p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")]
    assert [page for page in pages if f": {page}" not in nav] == []


# --------------------------------------------------------------------------- the map


PACKAGE = REPO / "service" / "tbhub"
PARTS = "|".join(sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))
# `supervisor/loop.py`, `api/board_gate.judge`, `serve/replica.Replica.wake`, `web/static/x.js`
MODULE_REF = re.compile(rf"(?<![\w/.-])((?:{PARTS})/[\w/]*\w)((?:\.\w+)*)")


def defined_names(path: Path) -> set[str]:
    """Every function, class and assigned name in a module, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def broken_reference(path: str, suffix: str) -> bool:
    """Whether `path` + `suffix` names no file, package or definition in service/tbhub."""
    where = PACKAGE / path
    attributes = [a for a in suffix.split(".") if a]
    if where.with_suffix(".py").is_file():
        names = defined_names(where.with_suffix(".py"))
        return any(a not in names for a in attributes if a != "py")
    if where.is_dir():
        return False
    return not where.with_name(f"{where.name}{suffix}").is_file()  # web/static/starting.js


def test_every_module_the_map_and_the_docs_name_exists() -> None:
    """ARCHITECTURE.md and the docs name modules, functions and classes by path: a move or a
    rename that leaves one of them behind fails here."""
    pages = [REPO / "ARCHITECTURE.md", *sorted(DOCS.rglob("*.md"))]
    broken = [
        f"{page.relative_to(REPO)}:{number}: {path}{suffix}"
        for page in pages
        for number, line in enumerate(page.read_text().splitlines(), 1)
        for path, suffix in MODULE_REF.findall(line)
        if broken_reference(path, suffix)
    ]
    assert broken == []


def test_the_maps_layers_are_the_ones_the_layer_test_enforces() -> None:
    from tests.test_layers import LAYERS

    text = (REPO / "ARCHITECTURE.md").read_text().split("## The layers of the code", 1)[1]
    block = text.split("```", 2)[1]
    drawn = [
        set(re.findall(r"(\w+)/", match.group(1)))
        for line in block.splitlines()
        if (match := re.match(r"^ ((?:\w+/ +)+)", line))
    ]
    assert drawn == list(reversed(LAYERS))
