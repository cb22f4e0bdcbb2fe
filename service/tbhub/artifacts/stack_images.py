"""The images docker-compose.yml runs besides the board image, built on this machine from
what it has installed (rootfs.py), never pulled:

- `tbhub-server`: the Python tbhub runs on with tbhub's own requirements (copied from its
  environment), nginx, rsync and ssh for backups (`tbhub-server-base`), and tbhub's source
  tree (package, migrations, nginx template) in a layer on top; `tbhub` on PATH. It runs
  `tbhub serve` with its nginx, as on a host.
- `tbhub-postgres`: this machine's PostgreSQL server (Debian's postgresql package: its
  bin/, lib/ and share/ directories) and `/bin/sh`; on first start it creates the cluster,
  the user and the database from POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB.
- `tbhub-nginx`: nginx alone, for the TLS site in front (deploy/compose/nginx.conf).

Each tag is `<repository>:<digest of its inputs>` (files and versions), so an unchanged
machine builds nothing, and also `<repository>:local`, the name docker-compose.yml uses
unless .env names others.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import io
import json
import os
import shutil
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

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
)
from tbhub.core.errors import ConfigError
from tbhub.core.resources import SOURCE_ROOT

FORMAT = "1"  # raise when a layout below changes, so older images are not reused
PYTHON_LINK = PurePosixPath("/opt/tbhub/bin/python")
SITE = PurePosixPath("/opt/tbhub/site-packages")
SOURCE = PurePosixPath("/opt/tbhub/src")  # resources.SOURCE_ROOT inside the image
POSTGRES_UID = 999
NOBODY = 65534
# PostgreSQL without its JIT: llvmjit.so links LLVM (a hundred MB); the server runs without.
POSTGRES_SKIP = ("llvmjit", "bitcode")
ROOT_ACCOUNTS = "root:x:0:0:root:/root:/none\n"
NOBODY_ACCOUNT = f"nobody:x:{NOBODY}:{NOBODY}:nobody:/nonexistent:/none\n"

# First start of the database container: a cluster owned by POSTGRES_USER, password
# authentication from other containers, the database; then the server in the foreground.
# Only shell builtins: the image has /bin/sh and PostgreSQL, nothing else.
POSTGRES_ENTRYPOINT = b"""#!/bin/sh
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
user=${POSTGRES_USER:-tbhub}
database=${POSTGRES_DB:-tbhub}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\\n' "$POSTGRES_PASSWORD" | initdb --pgdata="$PGDATA" --username="$user" \\
    --pwfile=/dev/stdin --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 \\
    --no-locale
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "CREATE DATABASE \\"$database\\" OWNER \\"$user\\";" \\
    | postgres --single -D "$PGDATA" postgres
fi
exec postgres -D "$PGDATA" -c listen_addresses='*'
"""


def _program(name: str) -> Path:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if found is None:
        raise ConfigError(f"building the compose images needs {name}: apt-get install {name}")
    return Path(found)


def _digest(*parts: str) -> str:
    hasher = hashlib.sha256()
    for part in (FORMAT, *parts):
        hasher.update(part.encode() + b"\0")
    return hasher.hexdigest()[:16]


def _tree_digest(*roots: Path) -> str:
    """Names, sizes and modification times of every file below `roots`."""
    entries = []
    for root in roots:
        for directory, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                stat = (Path(directory) / name).stat()
                entries.append(f"{directory}/{name} {stat.st_size} {stat.st_mtime_ns}")
    return _digest(*entries)


@dataclass(frozen=True)
class StackImage:
    repository: str
    inputs: Callable[[], str]  # a digest of what goes in
    write: Callable[[RootFs, Progress], None]
    changes: list[str]


# -- tbhub-server -------------------------------------------------------------------------------


def _server_distributions() -> list[metadata.Distribution]:
    return distribution_closure(["tbhub"], extras=True)


SOURCE_PARTS = ("service/tbhub", "alembic", "nginx")


def _server_programs() -> list[Path]:
    """nginx and rsync, and ssh when this machine has it (backups to user@host:path)."""
    ssh = shutil.which("ssh")
    return [_program("nginx"), _program("rsync"), *([Path(ssh)] if ssh else [])]


def server_base_inputs() -> str:
    python, stdlib = host_python()
    dists = [f"{d.metadata['Name']}=={d.version}" for d in _server_distributions()]
    programs = [os.path.realpath(program) for program in _server_programs()]
    return _digest(str(python), sys.version, str(stdlib), *dists, *programs)


def write_server_base(root: RootFs, progress: Progress) -> None:
    """Everything of tbhub-server but tbhub's own source, which a layer on top adds."""
    python, stdlib = host_python()
    elves = Elves()
    progress("Python, its standard library and tbhub's requirements")
    add_python(root, python=python, stdlib=stdlib, link=PYTHON_LINK,
               dists=_server_distributions(), site=SITE, elves=elves)  # fmt: skip
    for program in _server_programs():
        root.add_file(program, PurePosixPath(str(program)))
        elves.paths.append(program)
    add_libraries(root, elves, progress)
    root.add_bytes(
        PurePosixPath("/usr/local/bin/tbhub"),
        f"#!{PYTHON_LINK}\nfrom tbhub.cli.main import main\n\nmain()\n".encode(),
        mode=0o755,
    )
    root.add_bytes(PurePosixPath("/etc/passwd"), (ROOT_ACCOUNTS + NOBODY_ACCOUNT).encode())
    root.add_bytes(PurePosixPath("/etc/group"), f"root:x:0:\nnogroup:x:{NOBODY}:\n".encode())
    for directory in ("/tmp", "/var/tmp"):
        root.add_dir(PurePosixPath(directory), 0o1777)
    for directory in ("/root", "/var/lib/tbhub", "/srv/tbhub/storage", "/var/backups/tbhub"):
        root.add_dir(PurePosixPath(directory), 0o755)


SERVER_BASE = StackImage(
    repository="tbhub-server-base",
    inputs=server_base_inputs,
    write=write_server_base,
    changes=[
        "ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/bin",
        f"ENV PYTHONPATH={SOURCE}/service:{SITE}",
        "ENV PYTHONDONTWRITEBYTECODE=1",
        "ENV PYTHONNOUSERSITE=1",
        "ENV PYTHONUNBUFFERED=1",
        "ENV LANG=C.UTF-8",
        "ENV HOME=/root",
        "ENV TBHUB_DATA_DIR=/var/lib/tbhub",
        "ENV TBHUB_STORAGE_ROOT=/srv/tbhub/storage",
        "WORKDIR /var/lib/tbhub",
        "EXPOSE 8080/tcp",
        'ENTRYPOINT ["/usr/local/bin/tbhub"]',
        'CMD ["serve"]',
    ],
)


# -- tbhub-postgres ---------------------------------------------------------------------------


def _postgres_dirs() -> tuple[Path, Path]:
    """(/usr/lib/postgresql/<newest>, /usr/share/postgresql/<newest>)."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                      key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)  # fmt: skip
    if not versions:
        raise ConfigError(
            "building the compose images needs a PostgreSQL server on this machine: "
            "apt-get install postgresql"
        )
    home = versions[-1].parents[1]
    return home, Path("/usr/share/postgresql") / home.name


def postgres_inputs() -> str:
    home, share = _postgres_dirs()
    shell = os.path.realpath("/bin/sh")
    return _digest(_tree_digest(home, share), shell, POSTGRES_ENTRYPOINT.decode(), *POSTGRES_SKIP)


def write_postgres(root: RootFs, progress: Progress) -> None:
    home, share = _postgres_dirs()
    progress(f"PostgreSQL from {home}")
    elves = Elves()
    elves.paths += root.add_tree(home, PurePosixPath(str(home)), skip=POSTGRES_SKIP)
    root.add_tree(share, PurePosixPath(str(share)))
    root.add_tree(Path("/usr/share/zoneinfo"), PurePosixPath("/usr/share/zoneinfo"))
    shell = Path(os.path.realpath("/bin/sh"))
    root.add_file(shell, PurePosixPath("/bin/sh"))
    elves.paths.append(shell)
    add_libraries(root, elves, progress)
    root.add_bytes(PurePosixPath("/usr/local/bin/tbhub-postgres"), POSTGRES_ENTRYPOINT, 0o755)
    account = f"postgres:x:{POSTGRES_UID}:{POSTGRES_UID}:PostgreSQL:/var/lib/postgresql:/none\n"
    root.add_bytes(PurePosixPath("/etc/passwd"), (ROOT_ACCOUNTS + account).encode())
    root.add_bytes(PurePosixPath("/etc/group"), f"root:x:0:\npostgres:x:{POSTGRES_UID}:\n".encode())
    root.add_dir(PurePosixPath("/tmp"), 0o1777)
    root.add_dir(PurePosixPath("/var/lib/postgresql"), 0o755, owner=POSTGRES_UID)
    root.add_dir(PurePosixPath("/var/lib/postgresql/data"), 0o700, owner=POSTGRES_UID)
    root.add_dir(PurePosixPath("/var/run/postgresql"), 0o2775, owner=POSTGRES_UID)


def _postgres_changes() -> list[str]:
    home, _share = _postgres_dirs()
    return [
        f"ENV PATH={home}/bin:/usr/local/bin:/bin",
        "ENV PGDATA=/var/lib/postgresql/data",
        "ENV LANG=C",
        "ENV TZ=UTC",
        f"USER {POSTGRES_UID}:{POSTGRES_UID}",
        "WORKDIR /var/lib/postgresql",
        "EXPOSE 5432/tcp",
        'ENTRYPOINT ["/usr/local/bin/tbhub-postgres"]',
    ]


# -- tbhub-nginx ------------------------------------------------------------------------------


def nginx_inputs() -> str:
    return _digest(os.path.realpath(_program("nginx")))


def write_nginx(root: RootFs, progress: Progress) -> None:
    nginx = _program("nginx")
    root.add_file(nginx, PurePosixPath("/usr/sbin/nginx"))
    add_libraries(root, Elves(paths=[nginx]), progress)
    root.add_bytes(PurePosixPath("/etc/passwd"), (ROOT_ACCOUNTS + NOBODY_ACCOUNT).encode())
    root.add_bytes(PurePosixPath("/etc/group"), f"root:x:0:\nnogroup:x:{NOBODY}:\n".encode())
    root.add_dir(PurePosixPath("/tmp"), 0o1777)


NGINX = StackImage(
    repository="tbhub-nginx",
    inputs=nginx_inputs,
    write=write_nginx,
    changes=[
        "EXPOSE 443/tcp",
        "EXPOSE 80/tcp",
        'ENTRYPOINT ["/usr/sbin/nginx", "-e", "stderr", "-c", "/etc/tbhub/nginx.conf"]',
    ],
)


# -- building -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Built:
    repository: str
    tag: str
    built: bool  # False: the image for these inputs existed already
    seconds: float


def _postgres() -> StackImage:
    return StackImage(
        repository="tbhub-postgres",
        inputs=postgres_inputs,
        write=write_postgres,
        changes=_postgres_changes(),
    )


def _import(client: Any, image: StackImage, force: bool, progress: Progress) -> tuple[str, bool]:
    tag = f"{image.repository}:{image.inputs()}"
    if not force and image_exists(client, tag):
        return tag, False
    progress(f"building {tag}")
    changes = [*image.changes, f"LABEL org.tbhub.image={json.dumps(tag)}"]
    import_image(client, tag, lambda root: image.write(root, progress), changes, progress)
    return tag, True


def _server(client: Any, force: bool, progress: Progress) -> tuple[str, bool]:
    """tbhub-server: the base image, and tbhub's source in a layer of its own on top (a
    change to tbhub costs a small layer, not a new copy of Python and its libraries)."""
    base, _built = _import(client, SERVER_BASE, force, progress)
    source = _tree_digest(*(SOURCE_ROOT / part for part in SOURCE_PARTS))
    tag = f"tbhub-server:{_digest(base, source)}"
    if not force and image_exists(client, tag):
        return tag, False
    progress(f"building {tag}")
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        root = RootFs(tar)
        dockerfile = f"FROM {base}\nCOPY src {SOURCE}\nLABEL org.tbhub.image={json.dumps(tag)}\n"
        root.add_bytes(PurePosixPath("Dockerfile"), dockerfile.encode())
        for part in SOURCE_PARTS:
            root.add_tree(SOURCE_ROOT / part, PurePosixPath("src") / part)
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, pull=False,
                        rm=True, forcerm=True)  # fmt: skip
    return tag, True


def build_stack_images(
    client: Any, *, force: bool = False, local: bool = True, progress: Progress = lambda _: None
) -> list[Built]:
    """Build each image unless the one for its current inputs exists; with `local`, tag it
    `:local` too."""
    steps: list[tuple[str, Callable[[], tuple[str, bool]]]] = [
        ("tbhub-server", lambda: _server(client, force, progress)),
        ("tbhub-postgres", lambda: _import(client, _postgres(), force, progress)),
        ("tbhub-nginx", lambda: _import(client, NGINX, force, progress)),
    ]
    results = []
    for repository, step in steps:
        began = time.monotonic()
        tag, built = step()
        if local:
            client.images.get(tag).tag(repository, "local")
        results.append(Built(repository, tag, built, time.monotonic() - began))
    return results
