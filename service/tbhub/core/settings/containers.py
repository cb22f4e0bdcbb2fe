"""The containers settings: one group of tbhub's settings (combined in settings/__init__.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class ContainerSettings(BaseModel):
    """Board containers: the docker and swarm backends."""

    # Where boards run (issue 11): subprocesses here, containers on this dockerd, or swarm.
    board_backend: Literal["subprocess", "docker", "swarm"] = Field(
        default="subprocess",
        description="subprocess: boards are processes of this host (TBHUB_BOARD_LAUNCHER); "
        "docker: one container per board on the Docker daemon DOCKER_HOST names (the local "
        "socket by default); swarm: one Docker Swarm service per board, on any node the "
        "constraints allow (the daemon must be a swarm manager). See 'Boards in containers'.",
    )
    board_image: str | None = Field(
        default=None,
        description="The image containerised boards run. Unset: tbhub's own board image for "
        "the Python and TensorBoard tbhub runs on (`tbhub admin board-image build`), built "
        "at start when missing.",
    )
    board_cgroup_memory_ratio: float = Field(
        default=1.5,
        ge=0,
        le=100,
        description="A containerised board's cgroup memory limit, as a multiple of its memory "
        "limit (TBHUB_BOARD_MEMORY_LIMIT or the project's): the kernel's hard stop above "
        "tbhub's PSS check, which replaces a board blue/green first. A board killed there "
        "restarts with reason `oom`. 0: no cgroup limit.",
    )
    board_cpu_limit: float | None = Field(
        default=None,
        gt=0,
        le=1024,
        description="CPUs a containerised board may use (e.g. 1.5). Unset: no limit.",
    )
    installation_id: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9-]{0,39}$",
        description="Names this installation on its board containers and services "
        "(label org.tbhub.installation), so a restarted supervisor, or another replica on "
        "the same database, adopts them and leaves any other installation's alone. Unset: "
        "derived from the database URL (password left out).",
    )
    docker_network: str | None = Field(
        default=None,
        description="The Docker network board containers join; created when missing. "
        "Unset: tbhub-boards-<installation id>.",
    )
    docker_upstream: Literal["published", "bridge", "network"] = Field(
        default="published",
        description="How nginx and the supervisor reach a board container: published: its "
        "port published on TBHUB_DOCKER_PUBLISH_HOST only (tbhub on the Docker host); "
        "bridge: the container's address on TBHUB_DOCKER_NETWORK, a bridge with no traffic "
        "between containers, reached from the Docker host with no port published and no "
        "docker-proxy process in the way (tbhub on the host of a rootful dockerd; faster); "
        "network: the container's address on TBHUB_DOCKER_NETWORK, an internal network "
        "tbhub's own container must be attached to (tbhub in a container).",
    )
    docker_publish_host: str = Field(
        default="127.0.0.1",
        description="The host address a board container's port is published on "
        "(docker_upstream=published).",
    )
    docker_storage_root: Path | None = Field(
        default=None,
        description="The storage root as the Docker daemon sees it, when tbhub runs in a "
        "container (a host path, or a volume's mount point). Unset: TBHUB_STORAGE_ROOT.",
    )
    docker_user: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(:[0-9]+)?$",
        description="uid[:gid] board containers run as. Unset: tbhub's own uid and gid, so "
        "a board reads what a subprocess board would.",
    )
    swarm_constraints: list[str] = Field(
        default_factory=list,
        description="Placement constraints of board services, as a JSON list (e.g. "
        '["node.labels.tbhub-boards==true"]). Every node they allow needs the storage '
        "mounted at the same path and the board image.",
    )
