"""The reference tables of the docs, rendered from the code at build time so they cannot drift.

A page asks for a table with a line of its own, `<!-- reference: NAME -->`; this MkDocs hook
replaces it with the table NAME renders: `cli` (typer's command tree), `settings` (the
Settings class), `http-api` (the app's OpenAPI spec) or `permissions` (the roles matrix that
tests/api/test_roles.py checks against the app for every kind of caller). The row functions
are what tests/test_docs.py reads too: one place says what a reference holds.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)


def settings_class() -> type[Any]:
    from tbhub.core.settings import Settings

    return Settings


def _text(value: str) -> str:
    """Plain text made safe inside a Markdown table cell."""
    value = " ".join(value.split())
    return value.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(value: str) -> str:
    # A pipe inside a code span does not split a table cell (Python-Markdown's tables).
    return f"`` {value} ``" if "`" in value else f"`{value}`"


# ---------------------------------------------------------------------------------------
# Settings: one group per class of Settings.__mro__ that declares fields


@dataclass(frozen=True)
class SettingRow:
    env: str  # TBHUB_DATA_DIR
    toml_key: str  # data_dir
    default: str  # as Markdown
    description: str


@dataclass(frozen=True)
class SettingGroup:
    title: str  # the first line of the declaring class's docstring
    rows: list[SettingRow]


def _declaring_class(settings: type[Any], field: str) -> type[Any]:
    for cls in settings.__mro__:
        if field in vars(cls).get("__annotations__", {}):
            return cls
    return settings


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        # A computed default (a program found on this machine, say) is the description's to
        # explain; an empty container is a plain default.
        if not (isinstance(value, list | dict) and not value):
            return "computed"
    else:
        value = field.default
    if value is None:
        return "unset"
    if hasattr(value, "get_secret_value"):
        return "set"
    if isinstance(value, bool):
        return _code(str(value).lower())
    if isinstance(value, list | dict):
        return _code(json.dumps(value))
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _code(str(value))


def _title(cls: type[Any]) -> str:
    """The first line of a group class's docstring, as a heading."""
    return (cls.__doc__ or cls.__name__).strip().splitlines()[0].rstrip(".")


def settings_groups() -> list[SettingGroup]:
    """Every setting, grouped by the class of Settings.__mro__ that declares it, each group in
    the order of declaration."""
    settings = settings_class()
    prefix = settings.model_config.get("env_prefix", "")
    groups: dict[type[Any], list[SettingRow]] = {}
    for name, field in settings.model_fields.items():
        row = SettingRow(
            env=f"{prefix}{name}".upper(),
            toml_key=name,
            default=_default(field),
            description=field.description or "",
        )
        groups.setdefault(_declaring_class(settings, name), []).append(row)
    # In the order Settings names its groups (pydantic lists the last group's fields first).
    order = sorted(groups, key=settings.__mro__.index)
    return [SettingGroup(title=_title(cls), rows=groups[cls]) for cls in order]


def render_settings() -> str:
    lines: list[str] = []
    groups = settings_groups()
    for group in groups:
        if len(groups) > 1:
            lines += [f"### {_text(group.title)}", ""]
        lines += ["| variable | `tbhub.toml` key | default | what it sets |",
                  "| --- | --- | --- | --- |"]  # fmt: skip
        lines += [
            f"| {_code(r.env)} | {_code(r.toml_key)} | {r.default} | {_text(r.description)} |"
            for r in group.rows
        ]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# CLI: every command of typer's tree, with its usage, help and options


@dataclass(frozen=True)
class CommandDoc:
    path: str  # "tbhub admin user create"
    usage: str
    help: str
    params: list[tuple[str, str]]  # (how it is written, help)
    is_group: bool


def _walk(command: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _walk(sub, f"{path} {name}")


def cli_commands() -> list[CommandDoc]:
    """The root, every group and every command, depth first."""
    import typer

    from tbhub.cli.main import app

    root = typer.main.get_command(app)
    docs = []
    for path, command in _walk(root, "tbhub"):
        # typer's own click (it vendors one): the same help records `--help` prints.
        context = command.context_class(command, info_name=path)
        params = []
        for param in command.get_params(context):
            record = param.get_help_record(context)
            if param.name == "help":
                continue  # every command has it; the page says so once
            if record is not None:
                params.append(record)
            elif param.param_type_name == "argument":
                params.append((param.make_metavar(context), ""))
        docs.append(
            CommandDoc(
                path=path,
                usage=f"{path} {' '.join(command.collect_usage_pieces(context))}".strip(),
                help=(command.help or "").strip(),
                params=params,
                is_group=hasattr(command, "commands"),
            )
        )
    return docs


def _help_paragraphs(text: str) -> list[str]:
    # typer shows "\b" before a block it should not rewrap; the docs rewrap everything.
    return [_text(p.replace("\b", "")) for p in re.split(r"\n\s*\n", text) if p.strip()]


def render_cli() -> str:
    lines: list[str] = []
    for command in cli_commands():
        lines += [f"## {command.path}", "", "```text", command.usage, "```", ""]
        for paragraph in _help_paragraphs(command.help):
            lines += [paragraph, ""]
        if command.is_group:
            continue
        if command.params:
            lines += ["| option or argument | what it does |", "| --- | --- |"]
            lines += [f"| {_code(name)} | {_text(text)} |" for name, text in command.params]
            lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# HTTP API: every operation of the OpenAPI spec the app serves


@dataclass(frozen=True)
class Operation:
    method: str  # "GET"
    path: str  # "/api/v1/projects/{name}"
    tag: str
    summary: str
    description: str
    auth: str  # which credentials the operation accepts


def openapi_spec() -> dict[str, Any]:
    """The app's own spec, from an app built on a throwaway data dir (nothing is served)."""
    from pydantic import SecretStr

    from tbhub.core.settings import Settings, prepare_runtime
    from tbhub.serve.app import build_context, create_app

    with tempfile.TemporaryDirectory(prefix="tbhub-docs-") as tmp:
        key = SecretStr("docs-" + "k" * 32)
        settings = prepare_runtime(Settings(data_dir=Path(tmp), secret_key=key))
        context = build_context(settings)
        try:
            return create_app(context).openapi()
        finally:
            context.engine.dispose()


def _auth(operation: dict[str, Any], schemes: dict[str, Any]) -> str:
    names = [name for requirement in operation.get("security") or () for name in requirement]
    if not names:
        return "no credentials needed"
    words = {"token": "API token", "session": "signed-in session"}
    return " or ".join(words.get(n, schemes.get(n, {}).get("description", n)) for n in names)


def api_operations(spec: dict[str, Any] | None = None) -> list[Operation]:
    spec = spec if spec is not None else openapi_spec()
    schemes = spec.get("components", {}).get("securitySchemes", {})
    return [
        Operation(
            method=method.upper(),
            path=path,
            tag=(operation.get("tags") or ["other"])[0],
            summary=operation.get("summary", ""),
            description=operation.get("description", ""),
            auth=_auth(operation, schemes),
        )
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
    ]


def render_http_api() -> str:
    by_tag: dict[str, list[Operation]] = {}
    for operation in api_operations():
        by_tag.setdefault(operation.tag, []).append(operation)
    lines: list[str] = []
    for tag, operations in by_tag.items():
        lines += [f"### {_text(tag)}", "", "| operation | credentials | what it does |",
                  "| --- | --- | --- |"]  # fmt: skip
        for op in operations:
            what = _text(op.description or op.summary)
            lines.append(f"| {_code(f'{op.method} {op.path}')} | {op.auth} | {what} |")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Permissions: the matrix tests/api/test_roles.py asserts against the app


ROLES_TEST = REPO / "tests" / "api" / "test_roles.py"
CALLER_NAMES = {
    "None": "anonymous",
    "eve": "signed in, not a member",
    "carol": "viewer",
    "bob": "editor",
    "alice": "owner",
    "root": "instance admin",
    "bob-read": "an editor's read token",
    "bob-write": "an editor's write token",
    "alice-write": "an owner's write token",
    "root-write": "an admin's write token",
    "dave-write-speech": "a write token for another project",
}


@dataclass(frozen=True)
class PermissionRow:
    action: str
    request: str  # "POST /api/v1/projects/vision/runs"
    statuses: list[int]  # one per caller


def _request(call: ast.expr) -> str:
    """`t.client.post("/api/v1/...", ...)` -> "POST /api/v1/...", f-string parts as `{…}`."""
    assert isinstance(call, ast.Lambda) and isinstance(call.body, ast.Call)
    method = call.body.func.attr if isinstance(call.body.func, ast.Attribute) else "?"
    target = call.body.args[0]
    if isinstance(target, ast.Constant):
        path = str(target.value)
    else:
        assert isinstance(target, ast.JoinedStr)
        path = "".join(
            str(part.value) if isinstance(part, ast.Constant) else "{id}" for part in target.values
        )
    return f"{method.upper()} {path}"


def permission_matrix() -> tuple[list[str], list[PermissionRow]]:
    """(callers, rows), read from the test's source: it is data, and importing the test
    would need its fixtures."""
    tree = ast.parse(ROLES_TEST.read_text())
    values: dict[str, ast.expr] = {}
    target: ast.expr
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name):
            values[target.id] = value
    callers = [str(c) for c in ast.literal_eval(values["CALLERS"])]
    matrix = ast.literal_eval(values["MATRIX"])
    actions = values["ACTIONS"]
    assert isinstance(actions, ast.Dict)
    requests = {
        ast.literal_eval(k): _request(v) for k, v in zip(actions.keys, actions.values, strict=True)
        if k is not None
    }  # fmt: skip
    rows = [PermissionRow(a, requests.get(a, ""), list(s)) for a, s in matrix.items()]
    return callers, rows


def render_permissions() -> str:
    callers, rows = permission_matrix()
    header = " | ".join(_text(CALLER_NAMES.get(c, c)) for c in callers)
    lines = [f"| action | request | {header} |", "| --- | --- |" + " --- |" * len(callers)]
    for row in rows:
        statuses = " | ".join(str(s) for s in row.statuses)
        lines.append(f"| {_text(row.action)} | {_code(row.request)} | {statuses} |")
    return "\n".join(lines) + "\n"


RENDERERS: dict[str, Callable[[], str]] = {
    "cli": render_cli,
    "settings": render_settings,
    "http-api": render_http_api,
    "permissions": render_permissions,
}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: replace each reference marker with its table."""

    def render(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(f"unknown reference {name!r}; known: {', '.join(RENDERERS)}")
        return RENDERERS[name]()

    return MARKER.sub(render, markdown)
