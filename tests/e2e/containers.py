"""What the Docker and Swarm backend tests share: the daemon, a per-test installation id, and
the clean-up of everything labelled with it (containers, services, networks).

Every object a test makes carries `org.tbhub.installation=<its own id>`; clean-up filters
by that label, so containers, services and networks of anyone else are never touched.
The board image itself is shared: `make test` builds it (`tbhub admin board-image build`),
and a server builds it at start if it is missing; it is a build cache, named by a digest
of its inputs, not something a test makes.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import docker
import docker.errors
import httpx
import pytest

from tbhub.storage.sample_logs import write_project
from tbhub.supervisor.backends.containers import INSTALLATION, INSTANCE, remove_installation
from tbhub.supervisor.board_image import build_board_image
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import JSON, board_row, leaky_tensorboard, restart_reasons
from tests.e2e.test_boards import wait_for_board

# Listings taken before one that no container vanished from is given up on.
LIST_ATTEMPTS = 5


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        pytest.fail(
            f"these tests need a running Docker daemon ({exc}); `make test` starts one "
            "(deploy/start-dockerd.sh)"
        )
    yield client
    client.close()


def remove_labelled(client: Any, installation: str) -> None:
    """Remove every service, container and network carrying this installation's label."""
    remove_installation(client, installation)


@pytest.fixture(scope="session")
def board_image(docker_client: Any) -> str:
    """The board image, built now if missing, so no server has to build it at start."""
    return str(build_board_image(docker_client).tag)


@pytest.fixture
def installation(docker_client: Any, board_image: str) -> Iterator[str]:
    """An installation id of this test's own; everything labelled with it goes afterwards."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        remove_labelled(docker_client, name)


def labelled_containers(client: Any, installation: str, **labels: str) -> list[Any]:
    """Containers of this installation (all states), optionally with more labels. docker's
    client lists, then inspects each container listed: one removed in between (the
    supervisor replacing a board) is NotFound, and the listing is taken again."""
    wanted = [f"{INSTALLATION}={installation}", *(f"{k}={v}" for k, v in labels.items())]
    for _ in range(LIST_ATTEMPTS - 1):
        try:
            return list(client.containers.list(all=True, filters={"label": wanted}))
        except docker.errors.NotFound:
            continue
    return list(client.containers.list(all=True, filters={"label": wanted}))


def instance_container(client: Any, installation: str, instance_id: str) -> Any:
    (container,) = labelled_containers(client, installation, **{INSTANCE: instance_id})
    return container


def container_server(
    make_server: Callable[..., TbhubServer], installation: str, backend: str, **settings: str
) -> TbhubServer:
    return make_server(board_backend=backend, installation_id=installation, **settings)


def started_board(
    make_server: Callable[..., TbhubServer], installation: str, backend: str, *,
    leaky: bool = False, **settings: str,
) -> tuple[TbhubServer, httpx.Client]:  # fmt: skip
    """A server whose project `vision` (3 runs x 40 steps) has a board ready, and alice, its
    owner, signed in. `leaky`: the board is bench/leaky_board.py (keeps what it is asked)."""
    server = container_server(make_server, installation, backend, **settings)
    if leaky:
        server.env["TBHUB_TENSORBOARD_BIN"] = str(leaky_tensorboard(server))
    server.add_user("alice", "alice-password")
    write_project(server.add_project("vision", owner="alice"), runs=3, steps=40, tags=2)
    server.start()
    alice = server.sign_in("alice", "alice-password")
    wait_for_board(alice, "vision")
    return server, alice


def leak_past_the_cgroup_limit(server: TbhubServer, client: httpx.Client) -> None:
    """Make the leaky board keep 600 MiB in one request (past a 450 MiB cgroup limit, before
    any pass could see its PSS); the board must come back with one restart, reason oom."""
    with contextlib.suppress(httpx.HTTPError):  # the board may die while it answers
        client.get("/boards/vision/data/environment?tbhub_test_leak_mib=600", headers=JSON)
    wait_until(lambda: board_row(server).restarts, timeout=60, what="the OOM restart")
    wait_for_board(client, "vision")
    assert board_row(server).restarts == {"oom": 1}
    assert restart_reasons(server) == ["oom"]


def restart_and_adopt(server: TbhubServer, board_ids: Callable[[], list[str]]) -> None:
    """SIGKILL the server, start it again: the one board (container or service, as
    `board_ids` lists them) serves on, adopted rather than started again."""
    before = board_ids()
    assert len(before) == 1
    server.kill()
    server.start()
    alice = server.sign_in("alice", "alice-password")
    assert sorted(wait_for_board(alice, "vision").json()) == ["run-00", "run-01", "run-02"]
    assert board_ids() == before
    assert board_row(server).restarts == {}
