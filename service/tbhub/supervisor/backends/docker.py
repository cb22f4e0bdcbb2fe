"""Boards as containers on one Docker daemon: one container per board instance.

Each container runs the board image (`board_image.py`) with:
- only the project's directory mounted, read-only, at the path the spec names;
- a read-only root, a small /tmp in memory, every capability dropped, no new privileges,
  tbhub's uid and gid (TBHUB_DOCKER_USER), docker's init as PID 1;
- a cgroup memory limit (and no swap) when the spec carries one (`BoardSpec.memory_limit`:
  the project's limit times TBHUB_BOARD_CGROUP_MEMORY_RATIO); tbhub's PSS check still runs
  below it and replaces a growing board blue/green first;
- the network `TBHUB_DOCKER_NETWORK`, which tbhub creates: in `published` mode a bridge
  with no traffic between containers and no route out (masquerading off), the board's
  port published on 127.0.0.1 only; in `bridge` mode the same bridge with no port
  published, nginx reaching the container's address on it from the host (no docker-proxy
  process between them); in `network` mode an internal network that tbhub's own container
  joins, the upstream being the container's address there.

Labels (`containers.py`) are the only state: the installation, instance, project, spec
fingerprint and start time. A restarted supervisor lists containers by the installation
label and adopts them. The kernel's OOM kill shows as State.OOMKilled: exit reason `oom`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Set
from typing import Any

import docker
import docker.errors
from docker.types import LogConfig

from tbhub.supervisor.backends.containers import (
    INSTALLATION,
    INSTANCE,
    LOG_OPTIONS,
    BoardContainers,
    container_args,
    container_pss,
    established_in_container,
    inspect,
    instance_from_labels,
    oom_killed,
    stats_memory,
)
from tbhub.supervisor.backends.local import new_instance_id
from tbhub.supervisor.board_image import BOARD_PORT
from tbhub.supervisor.plan import BoardSpec, Instance

log = logging.getLogger("tbhub.supervisor")

TMP_SIZE = "16m"
STOP_SIGNALS = ("SIGINT", "SIGTERM")  # then SIGKILL, as for subprocess boards


class DockerBackend:
    def __init__(
        self,
        client: Any,
        config: BoardContainers,
        *,
        network: str,
        upstream_mode: str,
        publish_host: str,
    ) -> None:
        self.client = client
        self.config = config
        self.network = network
        self.upstream_mode = upstream_mode
        self.publish_host = publish_host
        self._ids: dict[str, str] = {}  # instance id -> container id, from the last listing
        self.ensure_network()

    def ensure_network(self) -> None:
        """Create the board network unless it exists (an operator's own is used as it is)."""
        if self.client.networks.list(names=[self.network]):
            return
        internal = self.upstream_mode == "network"
        options = {
            "com.docker.network.bridge.enable_icc": "false",
            "com.docker.network.bridge.enable_ip_masquerade": "false",
        }
        self.client.networks.create(
            self.network,
            driver="bridge",
            internal=internal,
            options={} if internal else options,
            labels={INSTALLATION: self.config.installation},
        )
        log.info("created docker network %s for boards", self.network)

    # -- the Backend contract --------------------------------------------------------------

    def start(self, spec: BoardSpec) -> Instance:
        config = self.config
        instance_id = new_instance_id(spec.project)
        started_at = time.time()
        limits: dict[str, Any] = {}
        if spec.memory_limit:
            limits = {"mem_limit": spec.memory_limit, "memswap_limit": spec.memory_limit}
        if config.nano_cpus:
            limits["nano_cpus"] = config.nano_cpus
        ports = {f"{BOARD_PORT}/tcp": (self.publish_host, None)}
        container = self.client.containers.run(
            config.image,
            container_args(spec),
            entrypoint=config.entrypoint(),
            name=f"tbhub-{instance_id}",
            detach=True,
            init=True,
            user=config.user,
            read_only=True,
            tmpfs={"/tmp": f"size={TMP_SIZE}"},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            mounts=config.mounts(spec),
            network=self.network,
            ports=ports if self.upstream_mode == "published" else None,  # else its address
            labels=config.labels(instance_id, spec, started_at),
            environment=config.environment(instance_id),
            log_config=LogConfig(type="json-file", config=LOG_OPTIONS),
            **limits,
        )
        log.info("board %s runs in container %s", spec.project, container.short_id)
        return Instance(instance_id, spec.project, spec.fingerprint, started_at, alive=True)

    def stop(self, instance: Instance, *, force: bool = False) -> None:
        container_id = self._container_id(instance.instance_id)
        if container_id is not None:
            for signal_name in () if force else STOP_SIGNALS:
                if not self._signal(container_id, signal_name) or self._wait_exit(container_id):
                    break
            else:
                self._signal(container_id, "SIGKILL")
                self._wait_exit(container_id)
        self.forget(instance)

    def list_instances(self, only: Set[str] | None = None) -> list[Instance]:
        instances = []
        ids = {} if only is None else dict(self._ids)
        for summary in self._labelled():
            if only is not None and (summary.get("Labels") or {}).get(INSTANCE) not in only:
                continue
            alive = summary.get("State") in ("running", "paused")
            exit_reason = None
            if not alive and oom_killed(self.client, summary["Id"]):
                exit_reason = "oom"
            found = instance_from_labels(
                summary.get("Labels") or {},
                alive=alive,
                upstream=self._upstream(summary) if alive else None,
                exit_reason=exit_reason,
            )
            if found is not None:
                instances.append(found)
                ids[found.instance_id] = summary["Id"]
        self._ids = ids
        return instances

    def forget(self, instance: Instance) -> None:
        container_id = self._container_id(instance.instance_id)
        if container_id is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(container_id, force=True)
        self._ids.pop(instance.instance_id, None)

    def memory_bytes(self, instance: Instance) -> int:
        container_id = self._container_id(instance.instance_id)
        if container_id is None:
            return 0
        pss = container_pss(self.client, container_id)
        if pss is not None:
            return pss
        # tbhub in another PID namespace (a container itself): the cgroup's own count.
        try:
            return stats_memory(self.client.api.stats(container_id, stream=False, one_shot=True))
        except docker.errors.APIError:
            return 0

    def active_requests(self, instance: Instance) -> int:
        container_id = self._container_id(instance.instance_id)
        if container_id is None:
            return 0
        return established_in_container(self.client, container_id)

    def reap_unknown(self) -> list[str]:
        """Remove containers with this installation's label that no instance label explains
        (made by hand, or by a tbhub whose labels this one cannot read)."""
        reaped = []
        for summary in self._labelled():
            if instance_from_labels(summary.get("Labels") or {}, alive=False) is None:
                name = (summary.get("Names") or [summary["Id"][:12]])[0].lstrip("/")
                log.warning("removing container %s: installation label, no board labels", name)
                with contextlib.suppress(docker.errors.NotFound):
                    self.client.api.remove_container(summary["Id"], force=True)
                reaped.append(name)
        return reaped

    def log_tail(self, instance: Instance, lines: int = 20) -> str:
        container_id = self._container_id(instance.instance_id)
        if container_id is None:
            return ""
        try:
            text = self.client.api.logs(container_id, tail=lines).decode(errors="replace")
            details = inspect(self.client, container_id)
        except docker.errors.APIError:
            return ""
        if details.get("State", {}).get("OOMKilled"):
            limit = details.get("HostConfig", {}).get("Memory") or 0
            text += f"\n(killed by the kernel at its cgroup memory limit, {limit / 2**20:.0f} MiB)"
        return text.strip("\n")

    def close(self) -> None:
        self.client.close()

    # -- containers ------------------------------------------------------------------------

    def _labelled(self) -> list[dict[str, Any]]:
        """One summary per container with this installation's label (a single API call)."""
        filters = {"label": self.config.label_filter}
        return list(self.client.api.containers(all=True, filters=filters))

    def _container_id(self, instance_id: str) -> str | None:
        """The container of an instance: as the last listing found it, else looked up."""
        if instance_id in self._ids:
            return self._ids[instance_id]
        labels = [self.config.label_filter, f"{INSTANCE}={instance_id}"]
        found = self.client.api.containers(all=True, filters={"label": labels})
        return str(found[0]["Id"]) if found else None

    def _upstream(self, summary: dict[str, Any]) -> str | None:
        if self.upstream_mode in ("bridge", "network"):
            networks = (summary.get("NetworkSettings") or {}).get("Networks") or {}
            address = (networks.get(self.network) or {}).get("IPAddress")
            return f"{address}:{BOARD_PORT}" if address else None
        for port in summary.get("Ports") or []:
            ours = port.get("PrivatePort") == BOARD_PORT and port.get("IP") == self.publish_host
            if ours and port.get("PublicPort"):
                return f"{self.publish_host}:{port['PublicPort']}"
        return None

    def _signal(self, container_id: str, signal_name: str) -> bool:
        """Send a signal; False once the container no longer runs (404, or 409)."""
        try:
            self.client.api.kill(container_id, signal=signal_name)
        except docker.errors.APIError:
            return False
        return True

    def _wait_exit(self, container_id: str) -> bool:
        deadline = time.monotonic() + self.config.stop_grace
        while time.monotonic() < deadline:
            if not inspect(self.client, container_id).get("State", {}).get("Running"):
                return True
            time.sleep(0.05)
        return False
