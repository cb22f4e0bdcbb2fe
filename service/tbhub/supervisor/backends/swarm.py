"""Boards as Docker Swarm services: one service (one task, never restarted by swarm) per board
instance, placed on any node the constraints allow.

The daemon tbhub talks to must be a swarm manager. Each service runs the board image with
the same confinement as a container of the docker backend (only the project directory,
read-only; read-only root; no capabilities; tbhub's uid), a memory limit from
`BoardSpec.memory_limit` and a CPU limit, the placement constraints of
TBHUB_SWARM_CONSTRAINTS, and its port published in host mode on the node that runs it: the
upstream is `<node address>:<published port>`. (The routing mesh is not used: it needs
IPVS, and would publish every board on every node.) Swarm's own restart policy is off:
the supervisor sees a task that ended, forgets the service and starts a new one, as for any
other backend.

Every node that may run boards needs the storage at the same path (NFS) and the board
image (`docker save | docker load`, or a registry named in TBHUB_BOARD_IMAGE). Memory (PSS)
and connections are measured for tasks on the node tbhub runs on; tasks elsewhere report
0, and only their cgroup limit holds them.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from collections.abc import Set
from typing import Any

import docker
import docker.errors
from docker.types import EndpointSpec, Mount, Resources, RestartPolicy

from tbhub.core.errors import ConfigError
from tbhub.supervisor.backends.containers import (
    INSTANCE,
    LOG_OPTIONS,
    BoardContainers,
    container_args,
    container_pss,
    established_in_container,
    inspect,
    instance_from_labels,
    oom_killed,
)
from tbhub.supervisor.backends.local import new_instance_id
from tbhub.supervisor.board_image import BOARD_PORT
from tbhub.supervisor.plan import BoardSpec, Instance

log = logging.getLogger("tbhub.supervisor")

TMP_BYTES = 16 << 20
# Task states that may still serve (or are on their way to); the others are final.
LIVE_STATES = frozenset(
    {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready", "starting",
     "running"}
)  # fmt: skip


def service_name(instance_id: str) -> str:
    """A service name (at most 63 characters) unique to the instance."""
    digest = hashlib.sha256(instance_id.encode()).hexdigest()[:8]
    return f"tbhub-{instance_id[:40].rstrip('-')}-{digest}"


class SwarmBackend:
    def __init__(
        self, client: Any, config: BoardContainers, *, constraints: list[str] | None = None
    ) -> None:
        self.client = client
        self.config = config
        self.constraints = list(constraints or ())
        self._node_addresses: dict[str, str] = {}
        # instance id -> (service id, its newest task), from the last listing
        self._services: dict[str, tuple[str, dict[str, Any] | None]] = {}
        info = client.info().get("Swarm", {})
        if not info.get("ControlAvailable"):
            raise ConfigError(
                "TBHUB_BOARD_BACKEND=swarm needs a swarm manager, and this Docker daemon is "
                "not one; run `docker swarm init` (or join it as a manager), or point "
                "DOCKER_HOST at a manager"
            )
        self.local_node = str(info.get("NodeID", ""))

    # -- the Backend contract --------------------------------------------------------------

    def start(self, spec: BoardSpec) -> Instance:
        config = self.config
        instance_id = new_instance_id(spec.project)
        started_at = time.time()
        labels = config.labels(instance_id, spec, started_at)
        mounts = [*config.mounts(spec), Mount("/tmp", None, type="tmpfs", tmpfs_size=TMP_BYTES)]
        self.client.services.create(
            config.image,
            command=config.entrypoint(),
            args=container_args(spec),
            name=service_name(instance_id),
            labels=labels,
            container_labels=labels,
            env=[f"{k}={v}" for k, v in config.environment(instance_id).items()],
            user=config.user,
            init=True,
            read_only=True,
            cap_drop=["ALL"],
            mounts=mounts,
            stop_signal="SIGINT",
            stop_grace_period=int(config.stop_grace * 1_000_000_000),
            resources=Resources(mem_limit=spec.memory_limit or 0, cpu_limit=config.nano_cpus),
            restart_policy=RestartPolicy(condition="none"),
            constraints=self.constraints,
            endpoint_spec=EndpointSpec(
                ports=[{"Protocol": "tcp", "TargetPort": BOARD_PORT, "PublishMode": "host"}]
            ),
            log_driver="json-file",
            log_driver_options=LOG_OPTIONS,
        )
        log.info("board %s runs as swarm service %s", spec.project, service_name(instance_id))
        return Instance(instance_id, spec.project, spec.fingerprint, started_at, alive=True)

    def stop(self, instance: Instance, *, force: bool = False) -> None:
        """Remove the service: swarm sends SIGINT, then SIGKILL after the grace period.
        `force` kills a task on this node at once first."""
        if force:
            container_id = self._local_container(instance.instance_id)
            if container_id is not None:
                with contextlib.suppress(docker.errors.APIError):
                    self.client.api.kill(container_id, signal="SIGKILL")
        self.forget(instance)

    def list_instances(self, only: Set[str] | None = None) -> list[Instance]:
        services = [s for s in self._labelled() if only is None or _labels(s).get(INSTANCE) in only]
        tasks = self._newest_tasks([s["ID"] for s in services])
        instances = []
        seen: dict[str, tuple[str, dict[str, Any] | None]] = (
            {} if only is None else dict(self._services)
        )
        for service in services:
            task = tasks.get(service["ID"])
            state = (task or {}).get("Status", {}).get("State", "new")
            alive = state in LIVE_STATES
            found = instance_from_labels(
                _labels(service),
                alive=alive,
                upstream=self._upstream(task) if alive and task else None,
                exit_reason=None if alive or task is None else self._exit_reason(task),
            )
            if found is not None:
                instances.append(found)
                seen[found.instance_id] = (service["ID"], task)
        self._services = seen
        return instances

    def forget(self, instance: Instance) -> None:
        service_id = self._service_id(instance.instance_id)
        if service_id is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_service(service_id)
        self._services.pop(instance.instance_id, None)

    def memory_bytes(self, instance: Instance) -> int:
        container_id = self._local_container(instance.instance_id)
        if container_id is None:
            return 0  # on another node: only its cgroup limit holds it
        return container_pss(self.client, container_id) or 0

    def active_requests(self, instance: Instance) -> int:
        container_id = self._local_container(instance.instance_id)
        if container_id is None:
            return 0
        return established_in_container(self.client, container_id)

    def reap_unknown(self) -> list[str]:
        """Remove services with this installation's label that no instance label explains."""
        reaped = []
        for service in self._labelled():
            spec = service.get("Spec", {})
            if instance_from_labels(spec.get("Labels") or {}, alive=False) is None:
                log.warning("removing swarm service %s: installation label, no board labels",
                            spec.get("Name"))  # fmt: skip
                with contextlib.suppress(docker.errors.NotFound):
                    self.client.api.remove_service(service["ID"])
                reaped.append(str(spec.get("Name")))
        return reaped

    def log_tail(self, instance: Instance, lines: int = 20) -> str:
        service_id = self._service_id(instance.instance_id)
        if service_id is None:
            return ""
        text = ""
        with contextlib.suppress(docker.errors.APIError):
            chunks = self.client.api.service_logs(service_id, stdout=True, stderr=True, tail=lines)
            text = b"".join(chunks).decode(errors="replace")
        task = self._services.get(instance.instance_id, ("", None))[1]
        error = (task or {}).get("Status", {}).get("Err")
        if task is not None and self._exit_reason(task) == "oom":
            error = "killed by the kernel at its cgroup memory limit"
        return (text.strip("\n") + (f"\n({error})" if error else "")).strip("\n")

    def close(self) -> None:
        self.client.close()

    # -- services, tasks, nodes ------------------------------------------------------------

    def _labelled(self) -> list[dict[str, Any]]:
        return list(self.client.api.services(filters={"label": self.config.label_filter}))

    def _newest_tasks(self, service_ids: list[str]) -> dict[str, dict[str, Any]]:
        """service id -> its newest task, in one call."""
        if not service_ids:
            return {}
        newest: dict[str, dict[str, Any]] = {}
        for task in self.client.api.tasks(filters={"service": service_ids}):
            service_id = task.get("ServiceID")
            if service_id not in service_ids:
                continue
            index = task.get("Version", {}).get("Index", 0)
            if service_id not in newest or index > newest[service_id]["Version"]["Index"]:
                newest[service_id] = task
        return newest

    def _service_id(self, instance_id: str) -> str | None:
        if instance_id in self._services:
            return self._services[instance_id][0]
        with contextlib.suppress(docker.errors.NotFound):
            return str(self.client.api.inspect_service(service_name(instance_id))["ID"])
        return None

    def _local_container(self, instance_id: str) -> str | None:
        """The task's container, when it runs on the node tbhub talks to."""
        task = self._services.get(instance_id, ("", None))[1]
        if task is None or task.get("NodeID") != self.local_node:
            return None
        container_id = task.get("Status", {}).get("ContainerStatus", {}).get("ContainerID")
        return str(container_id) if container_id else None

    def _upstream(self, task: dict[str, Any]) -> str | None:
        if task.get("Status", {}).get("State") != "running":
            return None
        published = self._ipv4_port(task)
        if published is None:
            ports = task.get("Status", {}).get("PortStatus", {}).get("Ports") or []
            published = next(
                (p["PublishedPort"] for p in ports
                 if p.get("TargetPort") == BOARD_PORT and p.get("PublishedPort")), None,
            )  # fmt: skip
        address = self._node_address(str(task.get("NodeID", "")))
        return f"{address}:{published}" if address and published else None

    def _ipv4_port(self, task: dict[str, Any]) -> int | None:
        """The port published on the node's IPv4 addresses, read from a local task's
        container: the task lists its IPv4 and IPv6 ports alike, and Docker may pick two."""
        container_id = task.get("Status", {}).get("ContainerStatus", {}).get("ContainerID")
        if task.get("NodeID") != self.local_node or not container_id:
            return None
        ports = inspect(self.client, container_id).get("NetworkSettings", {}).get("Ports") or {}
        for binding in ports.get(f"{BOARD_PORT}/tcp") or []:
            if binding.get("HostIp") == "0.0.0.0" and binding.get("HostPort"):
                return int(binding["HostPort"])
        return None

    def _node_address(self, node_id: str) -> str | None:
        if node_id not in self._node_addresses:
            try:
                node = self.client.api.inspect_node(node_id)
            except docker.errors.APIError:
                return None
            self._node_addresses[node_id] = str(node.get("Status", {}).get("Addr", ""))
        return self._node_addresses[node_id] or None

    def _exit_reason(self, task: dict[str, Any]) -> str | None:
        """`oom` when the task's container (on this node) was killed at its memory limit."""
        if task.get("NodeID") != self.local_node:
            return None
        container_id = task.get("Status", {}).get("ContainerStatus", {}).get("ContainerID")
        if not container_id:
            return None
        return "oom" if oom_killed(self.client, container_id) else None


def _labels(service: dict[str, Any]) -> dict[str, str]:
    return service.get("Spec", {}).get("Labels") or {}
