"""The board image: built on this machine from the Python tbhub runs on; nothing is pulled.

The image starts FROM scratch and holds exactly what a board runs:
- the interpreter and its standard library (less tests, IDLE, tkinter, the static library);
- TensorBoard and waitress (the board's HTTP server) with their requirements, copied from
  tbhub's own environment (`importlib.metadata`: the files each distribution's RECORD lists);
- tbhub's launcher (`tbhub.supervisor.board_process`, with `board_assets`, `lazy_plugins`
  and the `data_server` package) and nothing else of tbhub;
- the shared libraries every ELF file among those links, as `ldd` resolves them;
- /etc/passwd and /etc/group naming nobody, and an empty /tmp.

The tag is `tbhub-board:<digest of those inputs>` (interpreter, distributions and their
versions, launcher source, this format), so a build is skipped while the image for the
current inputs exists, and an upgrade of TensorBoard or the launcher builds a new one.
The root filesystem is written as one tar and handed to `docker import`: one layer,
a few seconds, no network.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

import tbhub
from tbhub.artifacts.rootfs import (
    Elves,
    Progress,
    RootFs,
    add_libraries,
    add_python,
    distribution_closure,
    host_python,
    image_exists,
    import_image,
    is_elf,
)

IMAGE_REPOSITORY = "tbhub-board"
FORMAT = "4"  # raise when the layout below changes, so older images are not reused
SITE = PurePosixPath("/opt/tbhub/site-packages")
# A stable name for the interpreter (a link to it), whatever path it has on the build host.
IMAGE_PYTHON = "/opt/tbhub/bin/python"
# The extra plugins (`tbhub admin plugins install`), copied from <data_dir>/board-plugins.
IMAGE_PLUGINS = PurePosixPath("/opt/tbhub/plugins")
ENTRYPOINT = [IMAGE_PYTHON, "-m", "tbhub.supervisor.board_process"]
BOARD_PORT = 6006  # TensorBoard's port inside a board container
# The distributions a board needs; their requirements follow: TensorBoard, waitress (the
# board's HTTP server, board_process.board_server) and the PyTorch profiler plugin, pinned
# with TensorBoard (constraints.txt) and loaded by the boards whose project turned it on.
ROOT_DISTRIBUTIONS = ("tensorboard", "waitress", "torch-tb-profiler")
LAUNCHER = "supervisor/board_process.py"  # the module of tbhub a board runs
# The modules of tbhub a board imports: the launcher, its static files' validators, the
# lazy loader of heavy plugins, and the data_server package (the quicker wait for
# TensorBoard's data server, the TCP_NODELAY on its socket, and the watch on its first load,
# which says when nginx may keep the board's answers).
DATA_SERVER_MODULES = tuple(f"supervisor/data_server/{name}.py" for name in (
    "__init__", "ingester", "port_wait", "no_delay", "first_load"))  # fmt: skip
LAUNCHER_MODULES = (LAUNCHER, "supervisor/board_assets.py", "supervisor/lazy_plugins.py",
                    *DATA_SERVER_MODULES)  # fmt: skip
# Its packages' __init__ files, written as these stubs: the image does not change with them.
PACKAGE_STUBS = {
    "__init__.py": b'"""tbhub: only the board launcher, in a board image."""\n',
    "supervisor/__init__.py": b"",
}
NOBODY = 65534


@dataclass(frozen=True)
class ImageInputs:
    """What goes into the image, and the digest that names it."""

    python: Path  # the real interpreter binary (a venv's python is a link to it)
    stdlib: Path
    distributions: tuple[tuple[str, str], ...]  # (name, version)
    launcher_root: Path  # the tbhub package directory the launcher modules come from
    plugin_dir: Path | None = None  # the extra plugins, copied whole
    plugins: tuple[tuple[str, str], ...] = ()  # their distributions (name, version)

    @property
    def digest(self) -> str:
        hasher = hashlib.sha256()
        for part in (FORMAT, str(self.python), sys.version, str(self.stdlib)):
            hasher.update(part.encode() + b"\0")
        for name, version in self.distributions:
            hasher.update(f"{name}=={version}\0".encode())
        for name, version in self.plugins:
            hasher.update(f"plugin {name}=={version}\0".encode())
        for module in LAUNCHER_MODULES:
            hasher.update((self.launcher_root / module).read_bytes())
        return hasher.hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.digest}"


def current_inputs(plugin_dir: Path | None = None) -> ImageInputs:
    """The inputs for the interpreter and environment this process runs in, and the extra
    plugins installed in `plugin_dir`."""
    python, stdlib = host_python()
    dists = distribution_closure(ROOT_DISTRIBUTIONS)
    installed = plugin_dir is not None and plugin_dir.is_dir()
    plugins = sorted(
        (d.metadata["Name"], d.version) for d in metadata.distributions(path=[str(plugin_dir)])
    ) if installed else []  # fmt: skip
    return ImageInputs(
        plugin_dir=plugin_dir if installed else None,
        plugins=tuple(plugins),
        python=python,
        stdlib=stdlib,
        distributions=tuple((d.metadata["Name"], d.version) for d in dists),
        launcher_root=Path(tbhub.__file__).parent,
    )


# -- the root filesystem -----------------------------------------------------------------


def write_rootfs(inputs: ImageInputs, root: RootFs, progress: Progress) -> None:
    """The board image's root filesystem."""
    elves = Elves()
    progress(f"standard library from {inputs.stdlib}")
    progress("distributions: " + ", ".join(f"{n} {v}" for n, v in inputs.distributions))
    add_python(
        root, python=inputs.python, stdlib=inputs.stdlib, link=PurePosixPath(IMAGE_PYTHON),
        dists=distribution_closure(ROOT_DISTRIBUTIONS), site=SITE, elves=elves,
    )  # fmt: skip
    for module in LAUNCHER_MODULES:
        root.add_file(inputs.launcher_root / module, SITE / "tbhub" / module)
    if inputs.plugin_dir is not None:
        progress("extra plugins: " + ", ".join(f"{n} {v}" for n, v in inputs.plugins))
        for path in root.add_tree(inputs.plugin_dir, IMAGE_PLUGINS):
            if is_elf(path):
                elves.paths.append(path)
                elves.copied.add(str(path.resolve()))
    for module, stub in PACKAGE_STUBS.items():
        root.add_bytes(SITE / "tbhub" / module, stub)
    add_libraries(root, elves, progress)
    root.add_bytes(
        PurePosixPath("/etc/passwd"), f"nobody:x:{NOBODY}:{NOBODY}:nobody:/tmp:/none\n".encode()
    )
    root.add_bytes(PurePosixPath("/etc/group"), f"nogroup:x:{NOBODY}:\n".encode())
    root.add_dir(PurePosixPath("/tmp"), 0o1777)


# -- docker ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False: the image for these inputs existed already
    seconds: float
    files: int = 0


def build_board_image(
    client: Any,
    *,
    force: bool = False,
    progress: Progress = lambda _: None,
    plugin_dir: Path | None = None,
) -> BuildResult:
    """Build the board image for the current inputs (and the extra plugins in `plugin_dir`)
    unless it exists (or `force`)."""
    began = time.monotonic()
    inputs = current_inputs(plugin_dir)
    if not force and image_exists(client, inputs.tag):
        return BuildResult(inputs.tag, built=False, seconds=time.monotonic() - began)
    files = import_image(
        client,
        inputs.tag,
        lambda root: write_rootfs(inputs, root, progress),
        changes=[
            f"ENV PYTHONPATH={SITE}",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV PYTHONNOUSERSITE=1",
            "ENV LANG=C.UTF-8",
            "ENV HOME=/tmp",
            f"USER {NOBODY}:{NOBODY}",
            "WORKDIR /tmp",
            f"EXPOSE {BOARD_PORT}/tcp",
            f"ENTRYPOINT {json.dumps(ENTRYPOINT)}",
            f"LABEL org.tbhub.board-image={inputs.digest}",
        ],
        progress=progress,
    )
    return BuildResult(inputs.tag, built=True, seconds=time.monotonic() - began, files=files)
