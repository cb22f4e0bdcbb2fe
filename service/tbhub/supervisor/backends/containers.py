"""What the Docker and Swarm backends share: labels, the board's command, and what the host
can see of a container (PSS of its processes, connections in its network namespace).

A board container or service carries every fact the supervisor needs as labels, so there
is no state file: a restarted supervisor (or another replica on the same database, which
derives the same installation id) lists them by the installation label and adopts them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors
import psutil
from docker.types import Mount
from sqlalchemy.engine import make_url

from tbhub.core.settings import Settings
from tbhub.supervisor.board_image import BOARD_PORT, IMAGE_PLUGINS, IMAGE_PYTHON
from tbhub.supervisor.board_process import CONTAINED_ENV, board_args
from tbhub.supervisor.plan import BoardSpec, Instance

INSTALLATION = "org.tbhub.installation"
INSTANCE = "org.tbhub.instance"
PROJECT = "org.tbhub.project"
FINGERPRINT = "org.tbhub.fingerprint"
STARTED_AT = "org.tbhub.started-at"
# A custom board program (TBHUB_TENSORBOARD_BIN) is mounted here, run by the image's Python.
PROGRAM = "/opt/tbhub/program"
TCP_ESTABLISHED = "01"  # the state column of /proc/net/tcp
# json-file logs: at most 2 MiB a board
LOG_OPTIONS = {"max-size": "1m", "max-file": "2"}


def installation_id(settings: Settings) -> str:
    """The label value naming this installation: set, or derived from the database URL."""
    if settings.installation_id:
        return settings.installation_id
    url = make_url(settings.db_url).render_as_string(hide_password=True)
    return "db-" + hashlib.sha256(url.encode()).hexdigest()[:12]


def instance_from_labels(
    labels: Mapping[str, str],
    *,
    alive: bool,
    upstream: str | None = None,
    exit_reason: str | None = None,
) -> Instance | None:
    """The instance the labels describe; None when they do not describe one completely."""
    try:
        return Instance(
            instance_id=labels[INSTANCE],
            project=labels[PROJECT],
            fingerprint=labels[FINGERPRINT],
            started_at=float(labels[STARTED_AT]),
            alive=alive,
            upstream=upstream,
            exit_reason=exit_reason,
        )
    except (KeyError, ValueError):
        return None


def container_args(spec: BoardSpec) -> list[str]:
    """The launcher's arguments inside a container: every address, on the board's port, and
    the extra plugins where the board image holds them."""
    # its own network namespace
    return board_args(spec, host="0.0.0.0", port=BOARD_PORT, plugin_path=str(IMAGE_PLUGINS))


@dataclass(frozen=True)
class BoardContainers:
    """What the Docker and Swarm backends both need to run a board's container."""

    installation: str
    image: str
    storage_root: Path
    daemon_storage_root: Path | None  # the storage root as the daemon sees it, if elsewhere
    user: str
    stop_grace: float
    cpu_limit: float | None = None
    program: str | None = None  # a custom board program (TBHUB_TENSORBOARD_BIN)

    def labels(self, instance_id: str, spec: BoardSpec, started_at: float) -> dict[str, str]:
        return {
            INSTALLATION: self.installation,
            INSTANCE: instance_id,
            PROJECT: spec.project,
            FINGERPRINT: spec.fingerprint,
            STARTED_AT: repr(started_at),
        }

    def environment(self, instance_id: str) -> dict[str, str]:
        return {"TBHUB_INSTANCE": instance_id, "TBHUB_OWNER": self.installation,
                CONTAINED_ENV: "mounts"}  # fmt: skip

    def entrypoint(self) -> list[str] | None:
        """The image's own entrypoint (the launcher), or the custom program."""
        return [IMAGE_PYTHON, PROGRAM] if self.program else None

    @property
    def label_filter(self) -> str:
        """The label filter that finds this installation's containers and services."""
        return f"{INSTALLATION}={self.installation}"

    def mounts(self, spec: BoardSpec) -> list[Mount]:
        """The project directory, read-only, and the custom board program if there is one."""
        mounts = [Mount(spec.logdir, self.project_source(spec), type="bind", read_only=True)]
        if self.program:
            mounts.append(Mount(PROGRAM, self.program, type="bind", read_only=True))
        return mounts

    def project_source(self, spec: BoardSpec) -> str:
        """The project directory as the Docker daemon sees it (tbhub may be a container)."""
        if self.daemon_storage_root is None:
            return spec.logdir
        return str(self.daemon_storage_root / Path(spec.logdir).relative_to(self.storage_root))

    @property
    def nano_cpus(self) -> int | None:
        return int(self.cpu_limit * 1_000_000_000) if self.cpu_limit else None


def default_user() -> str:
    return f"{os.getuid()}:{os.getgid()}"


# -- what this host sees of a container -------------------------------------------------


def _container_processes(pid: int, container_id: str) -> list[psutil.Process] | None:
    """The container's processes, if `pid` is its init as seen from here (same PID space)."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text()
        if container_id not in cgroup:
            return None  # another PID namespace, or a recycled PID
        init = psutil.Process(pid)
        return [init, *init.children(recursive=True)]
    except (OSError, psutil.Error):
        return None


def inspect(client: Any, container_id: str) -> dict[str, Any]:
    """The container's details; empty once it is gone."""
    try:
        return dict(client.api.inspect_container(container_id))
    except docker.errors.NotFound:
        return {}


def oom_killed(client: Any, container_id: str) -> bool:
    return bool(inspect(client, container_id).get("State", {}).get("OOMKilled"))


def init_pid(client: Any, container_id: str) -> int:
    return int(inspect(client, container_id).get("State", {}).get("Pid") or 0)


def container_pss(client: Any, container_id: str) -> int | None:
    """PSS of every process of the container; None when they are not visible from here."""
    processes = _container_processes(init_pid(client, container_id), container_id)
    if processes is None:
        return None
    total = 0
    for process in processes:
        try:
            total += process.memory_full_info().pss
        except (psutil.Error, AttributeError):
            continue
    return total


def stats_memory(stats: Mapping[str, object]) -> int:
    """Memory in use from the stats API, as `docker stats` counts it (less inactive cache)."""
    memory = stats.get("memory_stats")
    if not isinstance(memory, Mapping):
        return 0
    usage = int(memory.get("usage") or 0)
    detail = memory.get("stats") if isinstance(memory.get("stats"), Mapping) else {}
    assert isinstance(detail, Mapping)
    inactive = detail.get("total_inactive_file", detail.get("inactive_file", 0))
    return max(usage - int(inactive or 0), 0)


def established_in_container(client: Any, container_id: str, port: int = BOARD_PORT) -> int:
    """Connections established to `port` inside the container's network namespace.

    Read from /proc/<init pid>/net/tcp{,6}, which show the namespace of that process, so it
    counts nginx's requests however they arrive (published port or container address)."""
    pid = init_pid(client, container_id)
    if _container_processes(pid, container_id) is None:
        return 0
    count = 0
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            established = len(fields) > 3 and fields[3] == TCP_ESTABLISHED
            if established and int(fields[1].rsplit(":", 1)[1], 16) == port:
                count += 1
    return count


def remove_installation(client: Any, installation: str, *, timeout: float = 30.0) -> int:
    """Remove every board service, container and network labelled with `installation` (to
    retire an installation, or after a test or benchmark); nothing else is touched.
    Returns how many containers were removed."""
    label = {"label": f"{INSTALLATION}={installation}"}
    with contextlib.suppress(docker.errors.APIError):  # not a swarm manager: no services
        for service in client.api.services(filters=label):
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_service(service["ID"])
    removed = 0
    deadline = time.monotonic() + timeout
    while True:  # a removed service's task containers take a moment to appear and go
        found = client.api.containers(all=True, filters=label)
        for summary in found:
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(summary["Id"], force=True)
                removed += 1
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for network in client.api.networks(filters=label):
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_network(network["Id"])
    return removed
