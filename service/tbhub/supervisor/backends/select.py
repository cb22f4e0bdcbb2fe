"""The one place TBHUB_BOARD_BACKEND becomes a backend (subprocess, docker or swarm)."""

from __future__ import annotations

import logging
import socket
from typing import Any

from tbhub.core.errors import ConfigError
from tbhub.core.settings import Settings
from tbhub.supervisor.backends.base import Backend
from tbhub.supervisor.backends.containers import (
    BoardContainers,
    default_user,
    installation_id,
)
from tbhub.supervisor.backends.local import LocalBackend

log = logging.getLogger("tbhub.supervisor")


def make_backend(settings: Settings) -> Backend:
    if settings.board_backend == "subprocess":
        states = settings.board_states
        return LocalBackend(
            state_dir=states,
            owner=str(states),
            tensorboard_bin=settings.tensorboard_bin,
            stop_grace=settings.board_stop_grace,
            zygote_dir=settings.data_dir / "zygote"
            if settings.board_launcher == "zygote"
            else None,
            plugin_dir=settings.board_plugin_dir,
        )
    client = docker_client()
    config = BoardContainers(
        installation=installation_id(settings),
        image=board_image(settings, client),
        storage_root=settings.storage,
        daemon_storage_root=settings.docker_storage_root,
        user=settings.docker_user or default_user(),
        stop_grace=settings.board_stop_grace,
        cpu_limit=settings.board_cpu_limit,
        program=settings.tensorboard_bin,
    )
    if settings.board_backend == "swarm":
        from tbhub.supervisor.backends.swarm import SwarmBackend

        return SwarmBackend(client, config, constraints=settings.swarm_constraints)
    from tbhub.supervisor.backends.docker import DockerBackend

    return DockerBackend(
        client,
        config,
        network=settings.docker_network or f"tbhub-boards-{config.installation}",
        upstream_mode=settings.docker_upstream,
        publish_host=settings.docker_publish_host,
    )


def boards_place(settings: Settings) -> str:
    """Where this server's boards live: replicas that may adopt each other's boards agree on
    it (subprocess boards: one host and state dir; containers: one installation)."""
    if settings.board_backend == "subprocess":
        return f"local:{socket.gethostname()}:{settings.board_states}"
    return f"{settings.board_backend}:{installation_id(settings)}"


def docker_client() -> Any:
    """A client for the daemon DOCKER_HOST names (the local socket by default)."""
    import docker
    import docker.errors

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise ConfigError(
            f"TBHUB_BOARD_BACKEND needs a Docker daemon, and none answered ({exc}); start "
            "dockerd, set DOCKER_HOST, or set TBHUB_BOARD_BACKEND=subprocess"
        ) from None
    return client


def board_image(settings: Settings, client: Any) -> str:
    """The image boards run: the one configured, or tbhub's own, built when missing."""
    if settings.board_image:
        return settings.board_image
    from tbhub.supervisor.board_image import build_board_image

    result = build_board_image(client, progress=lambda line: log.info("board image: %s", line),
                               plugin_dir=settings.board_plugin_dir)  # fmt: skip
    if result.built:
        log.info("built board image %s in %.1fs", result.tag, result.seconds)
    return result.tag
