"""Boards as Docker Swarm services on a single-node swarm of the test machine's dockerd,
reached through tbhub's nginx at the port each task publishes on its node.

The swarm: if the daemon is not in one, the module makes a single-node swarm that listens
and advertises on 127.0.0.1 only, and leaves it again afterwards (removing the
docker_gwbridge network it brought, if that did not exist before). A swarm that was there
already is used and left as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import docker.errors
import httpx
import pytest

from tbhub.supervisor.backends.containers import INSTALLATION, INSTANCE
from tests.e2e.containers import leak_past_the_cgroup_limit, restart_and_adopt, started_board
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import board_row
from tests.e2e.test_boards import assert_exact_scalars, wait_for_board

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def swarm(docker_client: Any) -> Iterator[None]:
    state = docker_client.info()["Swarm"].get("LocalNodeState")
    if state == "active":
        yield
        return
    had_gwbridge = bool(docker_client.networks.list(names=["docker_gwbridge"]))
    docker_client.swarm.init(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:2377")
    try:
        yield
    finally:
        if not docker_client.services.list():  # nobody else started using it meanwhile
            docker_client.swarm.leave(force=True)
            if not had_gwbridge:
                for network in docker_client.networks.list(names=["docker_gwbridge"]):
                    with contextlib.suppress(docker.errors.APIError):
                        network.remove()


def started(
    make_server: Callable[..., TbhubServer], installation: str, **settings: Any
) -> tuple[TbhubServer, httpx.Client]:
    return started_board(make_server, installation, "swarm", **settings)


def board_services(client: Any, installation: str) -> list[Any]:
    return list(client.services.list(filters={"label": f"{INSTALLATION}={installation}"}))


def serving_service(server: TbhubServer, client: Any, installation: str) -> Any:
    instance_id = board_row(server).instance_id
    (service,) = client.services.list(
        filters={"label": [f"{INSTALLATION}={installation}", f"{INSTANCE}={instance_id}"]}
    )
    return service


def task_container(client: Any, service: Any) -> Any:
    (task,) = [t for t in service.tasks() if t["Status"]["State"] == "running"]
    return client.containers.get(task["Status"]["ContainerStatus"]["ContainerID"])


@pytest.mark.usefixtures("swarm")
def test_board_service_serves_exact_scalars_through_nginx_with_limits_and_placement(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, alice = started(
        make_server, installation, board_memory_limit="300MiB", board_cpu_limit="1.5",
        swarm_constraints='["node.role==manager"]',
    )  # fmt: skip
    assert_exact_scalars(alice, "vision", steps=40)

    service = serving_service(server, docker_client, installation)
    template = service.attrs["Spec"]["TaskTemplate"]
    assert template["Resources"]["Limits"] == {
        "MemoryBytes": int(300 * MiB * 1.5), "NanoCPUs": 1_500_000_000
    }  # fmt: skip
    assert template["Placement"]["Constraints"] == ["node.role==manager"]
    assert template["RestartPolicy"]["Condition"] == "none", "the supervisor restarts boards"
    project = str(server.storage / "vision")
    mounts = template["ContainerSpec"]["Mounts"]
    binds = [(m["Source"], m["Target"], m.get("ReadOnly")) for m in mounts if m["Type"] == "bind"]
    assert binds == [(project, project, True)], "only the project's directory, read-only"
    container = task_container(docker_client, service)
    assert container.attrs["HostConfig"]["ReadonlyRootfs"] is True
    assert container.attrs["HostConfig"]["CapDrop"] == ["ALL"]
    ports = service.tasks()[0]["Status"]["PortStatus"]["Ports"]  # IPv4 and IPv6
    assert {p["PublishMode"] for p in ports} == {"host"}
    bindings = container.attrs["NetworkSettings"]["Ports"]["6006/tcp"]
    (ipv4,) = [b["HostPort"] for b in bindings if b["HostIp"] == "0.0.0.0"]
    assert int(ipv4) in {p["PublishedPort"] for p in ports}
    assert board_row(server).upstream == f"127.0.0.1:{ipv4}", "the node's IPv4 port"


@pytest.mark.usefixtures("swarm")
def test_task_killed_from_outside_is_replaced_by_a_new_service(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, alice = started(make_server, installation)
    killed = serving_service(server, docker_client, installation)
    task_container(docker_client, killed).kill()
    wait_until(lambda: board_row(server).restarts, timeout=60, what="the crash restart")
    runs = wait_for_board(alice, "vision")
    assert sorted(runs.json()) == ["run-00", "run-01", "run-02"]
    assert board_row(server).restarts == {"crash": 1}
    assert [s.id for s in board_services(docker_client, installation)] != [killed.id]
    assert len(board_services(docker_client, installation)) == 1, "the dead service is removed"


@pytest.mark.usefixtures("swarm")
def test_task_killed_at_its_memory_limit_restarts_with_reason_oom(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, alice = started(
        make_server, installation, leaky=True, board_memory_limit="300MiB",
        board_cgroup_memory_ratio="1.5",
    )  # fmt: skip
    leak_past_the_cgroup_limit(server, alice)


@pytest.mark.usefixtures("swarm")
def test_restarted_supervisor_adopts_its_service(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, _alice = started(make_server, installation)
    restart_and_adopt(server, lambda: [s.id for s in board_services(docker_client, installation)])
