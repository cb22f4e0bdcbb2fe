"""Imports run one way: each part of the package imports only the parts below it.

The layers, lowest first (ARCHITECTURE.md draws them). A part may import its own modules
and any part of a lower layer, never one of the same or a higher layer. `client/` is what a
training job installs (the /pip/ wheel): it may import only the core and the record format.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "service" / "tbhub"

LAYERS: list[set[str]] = [
    {"core"},  # settings, errors, the database model; everything may import these
    {"storage", "artifacts"},  # files on the storage root; images and wheels tbhub builds
    {"domain", "auth"},  # users, projects, runs, boards...; who may do what
    {"housekeeping", "supervisor", "health"},  # retention and backup; the boards' runtime;
    # run health (the monitor, its detectors and incidents, notifications)
    {"http"},  # what every route shares: dependencies, errors, CSRF, headers, templates
    {"api", "web"},  # the JSON API and the HTML pages
    {"serve"},  # the app assembled, the server, replicas, nginx
    {"cli"},  # the commands
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
# Within a layer, parts that may use each other (the domain services check permissions).
PEERS = {("domain", "auth"), ("auth", "domain"), ("api", "web"), ("web", "api")}
CLIENT_MAY_IMPORT = {
    "tbhub", "tbhub.client", "tbhub.core.errors", "tbhub.core.upload_protocol",
    "tbhub.core.timestamps", "tbhub.core.values", "tbhub.storage.tfrecord",
}  # fmt: skip


def part_of(module: str) -> str | None:
    """The part (top-level package) a dotted tbhub module belongs to."""
    pieces = module.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[0] == "tbhub" else None


def imports(path: Path, *, on_load: bool = False) -> list[tuple[int, str]]:
    """(line, module) of every tbhub import in a file, at any depth, type-only ones too; or,
    `on_load`, only those that run when the module is imported (not in a function, not for
    the type checker)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if on_load else list(ast.walk(tree))
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "tbhub":  # a part (`from tbhub import storage`) or the package
                found.extend((node.lineno, f"tbhub.{a.name}" if (PACKAGE / a.name).is_dir()
                              else "tbhub") for a in node.names)  # fmt: skip
            elif node.module.startswith("tbhub."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("tbhub."))
    return found


def module_of(path: Path) -> str:
    return ".".join(("tbhub", *path.relative_to(PACKAGE).with_suffix("").parts))


def upward_imports() -> list[str]:
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = part_of(module_of(path))
        if source is None or (source not in RANK and source != "client"):
            continue
        for line, module in imports(path):
            target = part_of(module)
            where = f"{path.relative_to(PACKAGE)}:{line} imports {module}"
            if source == "client":
                if target != "client" and module not in CLIENT_MAY_IMPORT:
                    wrong.append(where)
                continue
            if target is None or target == source or target not in RANK:
                continue
            if RANK[target] >= RANK[source] and (source, target) not in PEERS:
                wrong.append(where)
    return wrong


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert parts - {"client"} == set(RANK)
    top = {"__init__.py", "__main__.py"}
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in top)
    assert loose == [], "every module lives in a part: put it in the layer of its role"


def test_imports_run_only_downward() -> None:
    assert upward_imports() == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    core = tmp_path / "core.py"
    core.write_text("from tbhub.domain.users import get_user\n")
    assert imports(core) == [(1, "tbhub.domain.users")]
    assert RANK[part_of("tbhub.domain.users") or ""] > RANK["core"]


def test_the_client_wheel_holds_every_module_its_modules_import() -> None:
    """The /pip/ wheel (artifacts/client_dist.py) works without the server's modules: what
    its modules import on load is in it (the CLI imports the server's parts only inside the
    server's commands)."""
    from tbhub.artifacts.client_dist import MODULES

    shipped = {path for pattern in MODULES for path in PACKAGE.glob(pattern)}
    shipped_modules = {module_of(path).removesuffix(".__init__") for path in shipped}
    missing = [
        f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        for path in sorted(shipped)
        for line, module in imports(path, on_load=True)
        if module not in shipped_modules and module != "tbhub"
    ]
    assert missing == []
