"""The tbhub-client package, as tbhub serves it at /pip/ for training machines with only pip:

    pip install --no-index --find-links https://tbhub.example/pip/ tbhub-client

`tbhub-client` is the Python client (`tbhub.client`) and the job's commands (`tbhub login`,
`run`, `upload`, `runs`, `projects`, `compare`: cli/job.py) as one wheel made from this
installed tbhub, beside a wheel of each distribution it needs, repacked from this Python's
own site-packages with the tags they were installed with. So pip needs no other index. The
pure-Python ones (all but pydantic-core) install anywhere; pydantic-core's wheel fits
machines with this server's Python version and platform, and pip says so elsewhere.
Wheels are built once per tbhub version into <data_dir>/pip/<version>/.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import threading
import zipfile
from importlib.metadata import Distribution, distribution
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement

import tbhub

NAME = "tbhub-client"
# What the wheel holds, relative to the tbhub package: the client and the job's commands.
MODULES = (
    "__init__.py", "core/__init__.py", "core/errors.py", "core/upload_protocol.py",
    "core/timestamps.py", "core/values.py", "storage/__init__.py", "storage/tfrecord.py",
    "client/*.py", "cli/__init__.py", "cli/common.py", "cli/runs.py",
    "cli/user.py", "cli/upload.py", "cli/projects.py", "cli/compare.py", "cli/views.py",
    "cli/job.py",
)  # fmt: skip
REQUIRES = ("httpx", "typer", "rich", "pydantic")
SKIPPED_METADATA = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


class WheelWriter:
    """A wheel: files added with their RECORD line, RECORD written last."""

    def __init__(self, path: Path, dist_info: str) -> None:
        self.path, self.dist_info = path, dist_info
        self.zip = zipfile.ZipFile(path.with_suffix(".tmp"), "w", zipfile.ZIP_DEFLATED)
        self.record: list[str] = []

    def add(self, arcname: str, data: bytes) -> None:
        self.zip.writestr(arcname, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self) -> Path:
        record = f"{self.dist_info}/RECORD"
        self.zip.writestr(record, "\n".join([*self.record, f"{record},,"]) + "\n")
        self.zip.close()
        self.path.with_suffix(".tmp").replace(self.path)
        return self.path


def client_wheel(into: Path) -> Path:
    """The tbhub-client wheel, made from this installed tbhub's own files."""
    version = tbhub.__version__
    dist_info = f"tbhub_client-{version}.dist-info"
    wheel = WheelWriter(into / f"tbhub_client-{version}-py3-none-any.whl", dist_info)
    package = Path(tbhub.__file__).parent
    for pattern in MODULES:
        for path in sorted(package.glob(pattern)):
            wheel.add(f"tbhub/{path.relative_to(package).as_posix()}", path.read_bytes())
    requires = "".join(f"Requires-Dist: {name}\n" for name in REQUIRES)
    wheel.add(f"{dist_info}/METADATA", (
        f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\nSummary: tbhub's "
        f"training-job client and commands\nRequires-Python: >=3.11\n{requires}"
    ).encode())  # fmt: skip
    wheel.add(f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: tbhub\n"
              b"Root-Is-Purelib: true\nTag: py3-none-any\n")  # fmt: skip
    wheel.add(f"{dist_info}/entry_points.txt", b"[console_scripts]\ntbhub = tbhub.cli.job:main\n")
    return wheel.close()


def dependencies(names: tuple[str, ...]) -> list[Distribution]:
    """The installed distributions `names` need, with theirs (no extras; markers judged
    for this Python)."""
    found: dict[str, Distribution] = {}
    todo = list(names)
    while todo:
        name = normalize(todo.pop())
        if name in found:
            continue
        dist = found[name] = distribution(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return [found[name] for name in sorted(found)]


def repacked_wheel(dist: Distribution, into: Path) -> Path:
    """An installed distribution as the wheel it was installed from (its files and tags)."""
    files = [PurePosixPath(str(f)) for f in dist.files or []]
    dist_info = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]  # fmt: skip
    parts = [sorted({tag.split("-")[i] for tag in tags}) for i in range(3)]
    tag = "-".join(".".join(part) for part in parts)
    name = re.sub(r"[-_.]+", "_", dist.metadata["Name"])
    wheel = WheelWriter(into / f"{name}-{dist.version}-{tag}.whl", dist_info)
    for file in files:
        if ".." in file.parts or "__pycache__" in file.parts or file.suffix == ".pyc":
            continue  # scripts pip wrote elsewhere, and bytecode
        if file.parts[0] == dist_info and file.name in SKIPPED_METADATA:
            continue
        wheel.add(file.as_posix(), Path(str(dist.locate_file(file))).read_bytes())
    return wheel.close()


class PipFiles:
    """The wheels /pip/ serves, built on first use (once per tbhub version)."""

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir / "pip" / tbhub.__version__
        self._lock = threading.Lock()
        self._names: list[str] | None = None

    def names(self) -> list[str]:
        with self._lock:
            if self._names is None:
                self.root.mkdir(parents=True, exist_ok=True)
                built = [client_wheel(self.root)]
                built += [repacked_wheel(d, self.root) for d in dependencies(REQUIRES)]
                self._names = sorted(path.name for path in built)
            return self._names

    def path(self, name: str) -> Path | None:
        return self.root / name if name in self.names() else None

    def page(self) -> str:
        links = "\n".join(
            f'<a href="{html.escape(name)}">{html.escape(name)}</a><br>' for name in self.names()
        )
        return (
            "<!DOCTYPE html>\n<html><head><title>tbhub-client</title></head><body>\n"
            f"<h1>tbhub-client and what it needs</h1>\n{links}\n</body></html>\n"
        )
