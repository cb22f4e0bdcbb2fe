"""Boards as containers on a real dockerd, reached through tbhub's nginx: served, confined,
replaced blue/green over their memory limit, restarted after a kill or an OOM kill, adopted
by a restarted supervisor, and unknown labelled containers reaped."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tbhub.supervisor.backends.containers import INSTALLATION
from tests.e2e.containers import (
    container_server,
    instance_container,
    labelled_containers,
    leak_past_the_cgroup_limit,
    restart_and_adopt,
    started_board,
)
from tests.e2e.harness import TBHUB, TbhubServer, wait_until
from tests.e2e.healing import (
    JSON,
    board_row,
    leak_past_the_limit_under_load,
    restart_reasons,
)
from tests.e2e.test_boards import assert_exact_scalars, wait_for_board
from tests.support.metrics_text import sample

MiB = 1024 * 1024


def started(
    make_server: Callable[..., TbhubServer], installation: str, **settings: Any
) -> tuple[TbhubServer, httpx.Client]:
    return started_board(make_server, installation, "docker", **settings)


def serving_container(server: TbhubServer, client: Any, installation: str) -> Any:
    row = board_row(server)
    assert row.instance_id is not None
    return instance_container(client, installation, row.instance_id)


def test_containerised_board_serves_exact_scalars_through_nginx_confined_to_its_project(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, alice = started(make_server, installation, board_memory_limit="300MiB")
    assert_exact_scalars(alice, "vision", steps=40)

    container = serving_container(server, docker_client, installation)
    host = container.attrs["HostConfig"]
    mounts = container.attrs["Mounts"]
    project = str(server.storage / "vision")
    assert [(m["Source"], m["Destination"], m["RW"]) for m in mounts if m["Type"] == "bind"] == [
        (project, project, False)
    ], "only the project's directory, read-only"
    assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"]
    assert host["Memory"] == host["MemorySwap"] == int(300 * MiB * 1.5), "cgroup limit, no swap"
    assert container.attrs["Config"]["User"] == f"{os.getuid()}:{os.getgid()}"
    (network,) = container.attrs["NetworkSettings"]["Networks"]
    assert network == f"tbhub-boards-{installation}"
    bindings = container.attrs["NetworkSettings"]["Ports"]["6006/tcp"]
    assert {b["HostIp"] for b in bindings} == {"127.0.0.1"}, "published on loopback only"
    assert board_row(server).upstream == f"127.0.0.1:{bindings[0]['HostPort']}"
    options = docker_client.networks.get(network).attrs["Options"]
    assert options["com.docker.network.bridge.enable_icc"] == "false"
    assert options["com.docker.network.bridge.enable_ip_masquerade"] == "false"


@pytest.mark.parametrize("mode", ["network", "bridge"])
def test_address_modes_reach_the_board_at_its_address_with_no_port_published(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str, mode: str
) -> None:
    # network: as tbhub in a container on the board network would. bridge: tbhub on the
    # Docker host, nginx straight to the container, with no docker-proxy between them.
    server, alice = started(make_server, installation, docker_upstream=mode)
    assert_exact_scalars(alice, "vision", steps=40)
    container = serving_container(server, docker_client, installation)
    network = f"tbhub-boards-{installation}"
    address = container.attrs["NetworkSettings"]["Networks"][network]["IPAddress"]
    assert board_row(server).upstream == f"{address}:6006"
    assert container.attrs["NetworkSettings"]["Ports"] in ({}, {"6006/tcp": None}, None)
    attrs = docker_client.networks.get(network).attrs
    if mode == "network":
        assert attrs["Internal"] is True, "no route out"
    else:  # the published mode's bridge: no traffic between containers, no route out
        assert attrs["Internal"] is False
        assert attrs["Options"]["com.docker.network.bridge.enable_icc"] == "false"
        assert attrs["Options"]["com.docker.network.bridge.enable_ip_masquerade"] == "false"


def test_container_killed_from_outside_is_restarted_as_a_crash(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, alice = started(make_server, installation)
    killed = serving_container(server, docker_client, installation)
    killed.kill()
    wait_until(lambda: board_row(server).restarts, timeout=60, what="the crash restart")
    runs = wait_for_board(alice, "vision")
    assert sorted(runs.json()) == ["run-00", "run-01", "run-02"]
    assert board_row(server).restarts == {"crash": 1}
    assert restart_reasons(server) == ["crash"]
    (replacement,) = labelled_containers(docker_client, installation)
    assert replacement.id != killed.id, "the dead container is removed, a new one serves"


def test_container_killed_at_its_cgroup_limit_restarts_with_reason_oom(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    # tbhub's PSS check would replace the board blue/green at 300 MiB; one request that
    # keeps 600 MiB passes the 450 MiB cgroup limit before a pass could see it.
    server, alice = started(
        make_server, installation, leaky=True, board_memory_limit="300MiB",
        board_cgroup_memory_ratio="1.5",
    )  # fmt: skip
    killed = serving_container(server, docker_client, installation)
    leak_past_the_cgroup_limit(server, alice)
    metrics = server.client().get("/metrics").text
    assert sample(metrics, "tbhub_board_restarts_total", reason="oom") == 1
    assert "killed at its memory limit" in server.log()
    assert killed.id not in {c.id for c in labelled_containers(docker_client, installation)}


def test_container_over_its_memory_limit_is_replaced_blue_green_with_no_failed_request(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, alice = started(
        make_server, installation, leaky=True, board_memory_limit="400MiB",
        board_memory_fresh_seconds="0", board_cgroup_memory_ratio="4",
    )  # fmt: skip
    old = serving_container(server, docker_client, installation)
    _before, new = leak_past_the_limit_under_load(
        server,
        alice,
        old_gone=lambda: old.id not in {c.id for c in
                                        labelled_containers(docker_client, installation)},
    )  # fmt: skip
    assert new.pss_bytes is not None and 0 < new.pss_bytes < 400 * MiB
    served_by = alice.get("/boards/vision/data/runs", headers=JSON).headers["x-test-instance"]
    assert served_by == new.instance_id, "nginx sends requests to the new container"
    assert "replaced (memory)" in server.log()


def test_restarted_supervisor_adopts_its_container(
    make_server: Callable[..., TbhubServer], docker_client: Any, installation: str
) -> None:
    server, _alice = started(make_server, installation)
    restart_and_adopt(
        server, lambda: [c.id for c in labelled_containers(docker_client, installation)]
    )


def test_unknown_container_with_the_installation_label_is_reaped_and_others_are_left(
    make_server: Callable[..., TbhubServer],
    docker_client: Any,
    installation: str,
    board_image: str,
) -> None:
    sleeper = {"entrypoint": ["/opt/tbhub/bin/python", "-c", "import time; time.sleep(600)"]}
    unknown = docker_client.containers.run(
        board_image, detach=True, labels={INSTALLATION: installation}, **sleeper
    )
    stranger_installation = f"{installation}-other"
    stranger = docker_client.containers.run(
        board_image, detach=True, labels={INSTALLATION: stranger_installation}, **sleeper
    )
    try:
        server = container_server(make_server, installation, "docker")
        server.data_dir.mkdir(parents=True)
        server.start()
        wait_until(lambda: not labelled_containers(docker_client, installation), timeout=30,
                   what="the unknown container to be removed")  # fmt: skip
        stranger.reload()
        assert stranger.status == "running", "another installation's container is untouched"
        assert f"removing container {unknown.name}" in server.log()
    finally:
        stranger.remove(force=True)


def test_board_image_build_does_nothing_while_the_image_for_these_inputs_exists(
    board_image: str,
) -> None:
    result = subprocess.run(
        [TBHUB, "admin", "board-image", "build", "--json"], capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    answer = json.loads(result.stdout)
    assert (answer["image"], answer["built"], answer["files"]) == (board_image, False, 0)
