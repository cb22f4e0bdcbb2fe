"""Images built on this machine from files it has, never pulled: a root filesystem written as
one tar (`RootFs`) and handed to `docker import`.

What the board image (supervisor/board_image.py) and the compose stack's images
(stack_images.py) share: the Python this process runs on with its standard library,
installed distributions (the files each one's RECORD lists), programs, the shared
libraries every ELF file among them links (as `ldd` resolves them), and the import.
"""

from __future__ import annotations

import importlib.metadata as metadata
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any

from packaging.requirements import Requirement

# Parts of the standard library no image runs.
STDLIB_SKIP = frozenset(
    {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
     "dist-packages", "__phello__"}
)  # fmt: skip
SKIP_PREFIX = "config-"  # config-3.11-x86_64-linux-gnu: the static libpython
LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")

Progress = Callable[[str], None]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_closure(
    roots: Iterable[str], *, extras: bool = False
) -> list[metadata.Distribution]:
    """The installed distributions `roots` need, requirements followed. Extras are left out,
    or with `extras`, those a requirement names (`psycopg[binary]`) are followed too, as far
    as they are installed."""
    found: dict[str, metadata.Distribution] = {}
    todo: list[tuple[str, frozenset[str], bool]] = [(name, frozenset(), True) for name in roots]
    while todo:
        name, wanted, required = todo.pop()
        key = _canonical(name)
        if key not in found:
            try:
                found[key] = metadata.distribution(name)
            except metadata.PackageNotFoundError:
                if required:
                    raise
                continue
        elif not wanted:
            continue
        for raw in found[key].requires or ():
            requirement = Requirement(raw)
            follow = frozenset(requirement.extras) if extras else frozenset()
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append((requirement.name, follow, required))
            elif any(requirement.marker.evaluate({"extra": extra}) for extra in wanted):
                todo.append((requirement.name, follow, False))
    return [found[key] for key in sorted(found)]


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

    def add_tree(
        self, source: Path, target: PurePosixPath, skip: tuple[str, ...] = ()
    ) -> list[Path]:
        """Every file below `source` but caches and names starting with one of `skip`;
        returns them."""
        added = []
        for directory, dirs, files in os.walk(source):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(skip)]
            for name in files:
                if skip and name.startswith(skip):
                    continue
                path = Path(directory) / name
                self.add_file(path, target / path.relative_to(source).as_posix())
                added.append(path)
        return added

    def add_bytes(self, target: PurePosixPath, data: bytes, mode: int = 0o644) -> None:
        info = self._entry(target, tarfile.REGTYPE, mode)
        info.size = len(data)
        self._add(info, io.BytesIO(data))

    def add_symlink(self, target: PurePosixPath, points_to: str) -> None:
        info = self._entry(target, tarfile.SYMTYPE, 0o777)
        info.linkname = points_to
        self._add(info)

    def add_dir(self, target: PurePosixPath, mode: int, owner: int = 0) -> None:
        info = self._entry(target, tarfile.DIRTYPE, mode)
        info.uid = info.gid = owner
        self._add(info)


@dataclass
class Elves:
    """The ELF files an image holds, whose libraries it needs too, and the real paths of the
    files already in it (the libraries a wheel bundles, numpy.libs/..., come with it)."""

    paths: list[Path] = field(default_factory=list)
    copied: set[str] = field(default_factory=set)


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def stdlib_files(stdlib: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(stdlib):
        if Path(root) == stdlib:
            dirs[:] = [d for d in dirs if d not in STDLIB_SKIP and not d.startswith(SKIP_PREFIX)]
        for name in files:
            if not name.startswith("_tkinter"):  # links the X libraries
                yield Path(root) / name


def distribution_files(
    dist: metadata.Distribution, site: PurePosixPath
) -> Iterator[tuple[Path, PurePosixPath]]:
    for entry in dist.files or ():
        source = Path(str(dist.locate_file(entry)))
        relative = PurePosixPath(os.path.normpath(str(entry)))
        if relative.parts[:1] == ("..",) or not source.is_file():
            continue  # scripts installed into bin/ and the like: no image runs them
        yield source, site / relative


def host_python() -> tuple[Path, Path]:
    """The interpreter this process runs on, as its real binary (a venv's python is a link
    to it), and its standard library: what an image copies."""
    base = getattr(sys, "_base_executable", sys.executable)
    return Path(os.path.realpath(base)), Path(sysconfig.get_paths()["stdlib"])


def add_python(
    root: RootFs,
    *,
    python: Path,
    stdlib: Path,
    link: PurePosixPath,
    dists: Iterable[metadata.Distribution],
    site: PurePosixPath,
    elves: Elves,
) -> None:
    """The interpreter at its own path (and a link to it at `link`), its standard library,
    and `dists` under `site`."""
    root.add_file(python, PurePosixPath(str(python)))
    root.add_symlink(link, str(python))
    elves.paths.append(python)
    for path in stdlib_files(stdlib):
        root.add_file(path, PurePosixPath(str(path)))
        if path.suffix == ".so":
            elves.paths.append(path)
    for dist in dists:
        for source, target in distribution_files(dist, site):
            root.add_file(source, target)
            elves.copied.add(os.path.realpath(source))
            if source.suffix == ".so" or ".so." in source.name or os.access(source, os.X_OK):
                elves.paths.append(source)


def linked_libraries(paths: Iterable[Path]) -> set[str]:
    """Every shared library (and the loader) the ELF files among `paths` need."""
    libraries: set[str] = set()
    for path in paths:
        if not is_elf(path):
            continue
        result = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
        libraries.update(os.path.normpath(lib) for lib in LDD_LINE.findall(result.stdout))
    return libraries


def add_libraries(root: RootFs, elves: Elves, progress: Progress) -> None:
    """The shared libraries the image's ELF files link, at the paths the loader looks in."""
    libraries = {
        lib for lib in linked_libraries(elves.paths) if os.path.realpath(lib) not in elves.copied
    }
    progress(f"{len(libraries)} shared libraries")
    for library in sorted(libraries):
        root.add_file(Path(library), PurePosixPath(library))


def image_exists(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def import_image(
    client: Any, tag: str, write: Callable[[RootFs], None], changes: list[str], progress: Progress
) -> int:
    """Write a root filesystem with `write` and `docker import` it as `tag` with the
    Dockerfile-style `changes`; returns the number of entries."""
    with tempfile.TemporaryFile() as out:
        with tarfile.open(fileobj=out, mode="w|") as tar:
            root = RootFs(tar)
            write(root)
            entries = len(root.names)
        progress(f"importing {entries} files as {tag}")
        out.seek(0)
        repository, name = tag.rsplit(":", 1)
        client.api.import_image_from_data(out, repository=repository, tag=name, changes=changes)
    return entries
