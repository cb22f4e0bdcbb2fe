"""The board image: built on this machine from the Python tbhub runs on; nothing is pulled.

The image starts FROM scratch and holds exactly what a board runs:
- the interpreter and its standard library (less tests, IDLE, tkinter, the static library);
- TensorBoard and its requirements, copied from tbhub's own environment
  (`importlib.metadata`: the files each distribution's RECORD lists);
- tbhub's launcher (`tbhub.supervisor.board_process`) and nothing else of tbhub;
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
import importlib.metadata as metadata
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from packaging.requirements import Requirement

import tbhub

IMAGE_REPOSITORY = "tbhub-board"
FORMAT = "2"  # raise when the layout below changes, so older images are not reused
SITE = PurePosixPath("/opt/tbhub/site-packages")
# A stable name for the interpreter (a link to it), whatever path it has on the build host.
IMAGE_PYTHON = "/opt/tbhub/bin/python"
ENTRYPOINT = [IMAGE_PYTHON, "-m", "tbhub.supervisor.board_process"]
BOARD_PORT = 6006  # TensorBoard's port inside a board container
# The distributions a board needs; their requirements follow.
ROOT_DISTRIBUTIONS = ("tensorboard",)
# Parts of the standard library a board never imports.
STDLIB_SKIP = frozenset(
    {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
     "dist-packages", "__phello__"}
)  # fmt: skip
SKIP_PREFIX = "config-"  # config-3.11-x86_64-linux-gnu: the static libpython
LAUNCHER = "supervisor/board_process.py"  # the one module of tbhub a board imports
# Its packages' __init__ files, written as these stubs: the image does not change with them.
PACKAGE_STUBS = {
    "__init__.py": b'"""tbhub: only the board launcher, in a board image."""\n',
    "supervisor/__init__.py": b"",
}
LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
NOBODY = 65534

Progress = Callable[[str], None]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_closure(roots: Iterable[str] = ROOT_DISTRIBUTIONS) -> list[metadata.Distribution]:
    """The installed distributions `roots` need, requirements followed (extras left out)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _canonical(name) in found:
            continue
        dist = metadata.distribution(name)
        found[_canonical(name)] = dist
        for raw in dist.requires or ():
            requirement = Requirement(raw)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[key] for key in sorted(found)]


@dataclass(frozen=True)
class ImageInputs:
    """What goes into the image, and the digest that names it."""

    python: Path  # the real interpreter binary (a venv's python is a link to it)
    stdlib: Path
    distributions: tuple[tuple[str, str], ...]  # (name, version)
    launcher_root: Path  # the tbhub package directory the launcher modules come from

    @property
    def digest(self) -> str:
        hasher = hashlib.sha256()
        for part in (FORMAT, str(self.python), sys.version, str(self.stdlib)):
            hasher.update(part.encode() + b"\0")
        for name, version in self.distributions:
            hasher.update(f"{name}=={version}\0".encode())
        hasher.update((self.launcher_root / LAUNCHER).read_bytes())
        return hasher.hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPOSITORY}:{self.digest}"


def current_inputs() -> ImageInputs:
    """The inputs for the interpreter and environment this process runs in."""
    base = getattr(sys, "_base_executable", sys.executable)
    dists = distribution_closure()
    return ImageInputs(
        python=Path(os.path.realpath(base)),
        stdlib=Path(sysconfig.get_paths()["stdlib"]),
        distributions=tuple((d.metadata["Name"], d.version) for d in dists),
        launcher_root=Path(tbhub.__file__).parent,
    )


# -- the root filesystem -----------------------------------------------------------------


class RootFs:
    """A tar of the image's root: files at chosen paths, parent directories made once."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.names: set[str] = set()

    def _add(self, info: tarfile.TarInfo, content: IO[bytes] | None = None) -> None:
        """Add an entry once, after the directories above it."""
        if info.name in self.names:
            return
        for parent in reversed(PurePosixPath(info.name).parents):
            if str(parent) != "." and str(parent) not in self.names:
                self._add(self._entry(PurePosixPath(str(parent)), tarfile.DIRTYPE, 0o755))
        self.tar.addfile(info, content)
        self.names.add(info.name)

    @staticmethod
    def _entry(target: PurePosixPath, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(str(target).lstrip("/"))
        info.type, info.mode, info.mtime = kind, mode, int(time.time())
        return info

    def add_file(self, source: Path, target: PurePosixPath) -> None:
        name = str(target).lstrip("/")
        if name in self.names:
            return
        info = self.tar.gettarinfo(os.path.realpath(source), arcname=name)  # links followed
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        with open(source, "rb") as handle:
            self._add(info, handle)

    def add_bytes(self, target: PurePosixPath, data: bytes) -> None:
        info = self._entry(target, tarfile.REGTYPE, 0o644)
        info.size = len(data)
        self._add(info, io.BytesIO(data))

    def add_symlink(self, target: PurePosixPath, points_to: str) -> None:
        info = self._entry(target, tarfile.SYMTYPE, 0o777)
        info.linkname = points_to
        self._add(info)

    def add_dir(self, target: PurePosixPath, mode: int) -> None:
        self._add(self._entry(target, tarfile.DIRTYPE, mode))


def _stdlib_files(stdlib: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(stdlib):
        if Path(root) == stdlib:
            dirs[:] = [d for d in dirs if d not in STDLIB_SKIP and not d.startswith(SKIP_PREFIX)]
        for name in files:
            if not name.startswith("_tkinter"):  # links the X libraries
                yield Path(root) / name


def _distribution_files(dist: metadata.Distribution) -> Iterator[tuple[Path, PurePosixPath]]:
    for entry in dist.files or ():
        source = Path(str(dist.locate_file(entry)))
        relative = PurePosixPath(os.path.normpath(str(entry)))
        if relative.parts[:1] == ("..",) or not source.is_file():
            continue  # scripts installed into bin/ and the like: a board needs none
        yield source, SITE / relative


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def linked_libraries(paths: Iterable[Path]) -> set[str]:
    """Every shared library (and the loader) the ELF files among `paths` need."""
    libraries: set[str] = set()
    for path in paths:
        if not _is_elf(path):
            continue
        result = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
        libraries.update(os.path.normpath(lib) for lib in LDD_LINE.findall(result.stdout))
    return libraries


def write_rootfs(inputs: ImageInputs, out: Any, progress: Progress) -> int:
    """Write the image's root filesystem as a tar to `out`; returns the number of files."""
    with tarfile.open(fileobj=out, mode="w|") as tar:
        root = RootFs(tar)
        elves: list[Path] = [inputs.python]
        copied: set[str] = set()  # libraries a wheel bundles come with it (numpy.libs/...)
        root.add_file(inputs.python, PurePosixPath(str(inputs.python)))
        root.add_symlink(PurePosixPath(IMAGE_PYTHON), str(inputs.python))
        progress(f"standard library from {inputs.stdlib}")
        for path in _stdlib_files(inputs.stdlib):
            root.add_file(path, PurePosixPath(str(path)))
            if path.suffix == ".so":
                elves.append(path)
        dists = distribution_closure()
        progress("distributions: " + ", ".join(f"{n} {v}" for n, v in inputs.distributions))
        for dist in dists:
            for source, target in _distribution_files(dist):
                root.add_file(source, target)
                copied.add(os.path.realpath(source))
                if source.suffix == ".so" or ".so." in source.name or os.access(source, os.X_OK):
                    elves.append(source)
        root.add_file(inputs.launcher_root / LAUNCHER, SITE / "tbhub" / LAUNCHER)
        for module, stub in PACKAGE_STUBS.items():
            root.add_bytes(SITE / "tbhub" / module, stub)
        libraries = {lib for lib in linked_libraries(elves) if os.path.realpath(lib) not in copied}
        progress(f"{len(libraries)} shared libraries")
        for library in sorted(libraries):
            root.add_file(Path(library), PurePosixPath(library))
        root.add_bytes(
            PurePosixPath("/etc/passwd"), f"nobody:x:{NOBODY}:{NOBODY}:nobody:/tmp:/none\n".encode()
        )
        root.add_bytes(PurePosixPath("/etc/group"), f"nogroup:x:{NOBODY}:\n".encode())
        root.add_dir(PurePosixPath("/tmp"), 0o1777)
        return len(root.names)


# -- docker ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False: the image for these inputs existed already
    seconds: float
    files: int = 0


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build_board_image(
    client: Any, *, force: bool = False, progress: Progress = lambda _: None
) -> BuildResult:
    """Build the board image for the current inputs unless it exists (or `force`)."""
    began = time.monotonic()
    inputs = current_inputs()
    if not force and image_exists(client, inputs.tag):
        return BuildResult(inputs.tag, built=False, seconds=time.monotonic() - began)
    with tempfile.TemporaryFile() as rootfs:
        files = write_rootfs(inputs, rootfs, progress)
        progress(f"importing {files} files as {inputs.tag}")
        rootfs.seek(0)
        repository, tag = inputs.tag.split(":")
        client.api.import_image_from_data(
            rootfs,
            repository=repository,
            tag=tag,
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
        )
    return BuildResult(inputs.tag, built=True, seconds=time.monotonic() - began, files=files)
