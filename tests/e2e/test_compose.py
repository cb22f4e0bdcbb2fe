"""docker-compose.yml, brought up with Debian's docker-compose on images built here: a
sign-in through its nginx over TLS, a board that runs as a container, and `down -v`.

The stack gets a project name, installation id, board network and subnets of its own, so
nothing of anyone else's is touched; whatever happens, it is taken down and every
container labelled with its installation removed. The images are a build cache named by
digests of their inputs (like the board image), shared by every run on this machine, so
they stay.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import shutil
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tbhub.artifacts.stack_images import build_stack_images
from tbhub.storage.sample_logs import write_project
from tbhub.supervisor.backends.containers import INSTALLATION, PROJECT
from tests.deploy.sites import self_signed
from tests.e2e.containers import remove_labelled
from tests.e2e.harness import wait_until
from tests.e2e.test_boards import wait_for_board
from tests.forms import post_sign_in
from tests.ports import free_port

REPO = Path(__file__).parents[2]
COMPOSE_LABEL = "com.docker.compose.project"


@pytest.fixture(scope="session")
def stack_images(docker_client: Any, board_image: str) -> dict[str, str]:
    """The .env variables naming the images, built now unless they exist."""
    built = {r.repository: r.tag for r in build_stack_images(docker_client, local=False)}
    return {
        "TBHUB_SERVER_IMAGE": built["tbhub-server"],
        "TBHUB_POSTGRES_IMAGE": built["tbhub-postgres"],
        "TBHUB_NGINX_IMAGE": built["tbhub-nginx"],
        "TBHUB_BOARD_IMAGE": board_image,
    }


# The stack's networks and the size of each; picked, like the defaults, in 172.16.0.0/16,
# which Docker's default address pools leave out.
SUBNET_SIZES = {"TBHUB_FRONT_SUBNET": 28, "TBHUB_BACKEND_SUBNET": 28, "TBHUB_BOARD_SUBNET": 24}


def free_subnets(client: Any) -> dict[str, str]:
    """A subnet for each of the stack's networks that no network on this daemon overlaps."""
    taken = [
        ipaddress.ip_network(config["Subnet"])
        for network in client.api.networks()
        for config in ((network.get("IPAM") or {}).get("Config") or [])
        if config.get("Subnet")
    ]
    chosen = {}
    for variable, prefix in SUBNET_SIZES.items():
        subnet = next(
            (s for s in ipaddress.ip_network("172.16.0.0/16").subnets(new_prefix=prefix)
             if not any(s.overlaps(other) for other in taken)),
            None,
        )  # fmt: skip
        if subnet is None:
            pytest.fail(f"no free /{prefix} in 172.16.0.0/16 for {variable}")
        taken.append(subnet)
        chosen[variable] = str(subnet)
    return chosen


@dataclass
class Stack:
    project: str
    env_file: Path
    url: str
    cert: Path
    storage: Path
    installation: str

    def compose(self, *args: str, stdin: str | None = None, timeout: float = 300
                ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        docker_compose = shutil.which("docker-compose")
        assert docker_compose, "docker-compose is missing: deploy/install-system-deps.sh test"
        result = subprocess.run(
            [docker_compose, "--project-name", self.project, "--project-directory", str(REPO),
             "--file", str(REPO / "docker-compose.yml"), "--env-file", str(self.env_file),
             *args],
            input=stdin, capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        assert result.returncode == 0, f"docker-compose {' '.join(args)}:\n{result.stderr}"
        return result

    def tbhub(self, *args: str, stdin: str | None = None) -> str:
        return self.compose("exec", "-T", "tbhub", "tbhub", *args, stdin=stdin).stdout


@pytest.fixture
def stack(docker_client: Any, stack_images: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    name = f"tbhubtest{uuid.uuid4().hex[:10]}"
    https_port = free_port()
    tls = tmp_path / "tls"
    tls.mkdir()
    cert, _key = self_signed(tls)
    storage = tmp_path / "storage"
    storage.mkdir()
    settings = {
        "TBHUB_PUBLIC_URL": f"https://127.0.0.1:{https_port}",
        "TBHUB_SECRET_KEY": secrets.token_hex(32),
        "POSTGRES_PASSWORD": secrets.token_hex(16),
        "TBHUB_TLS_DIR": str(tls),
        "TBHUB_LISTEN_ADDRESS": "127.0.0.1",
        "TBHUB_PUBLISH_HTTPS_PORT": str(https_port),
        "TBHUB_PUBLISH_HTTP_PORT": str(free_port()),
        "TBHUB_STORAGE_PATH": str(storage),
        "TBHUB_INSTALLATION_ID": f"test-{name}",
        "TBHUB_BOARD_NETWORK": f"{name}-boards",
        **free_subnets(docker_client),
        **stack_images,
    }
    env_file = tmp_path / "stack.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    made = Stack(name, env_file, settings["TBHUB_PUBLIC_URL"], cert, storage,
                 settings["TBHUB_INSTALLATION_ID"])  # fmt: skip
    try:
        yield made
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            logs = made.compose("logs", "--no-color", "--tail", "60", timeout=60).stdout
            print(f"--- docker-compose logs ---\n{logs}")  # shown on failure
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            made.compose("down", "--volumes", "--remove-orphans", "--timeout", "30")
        remove_labelled(docker_client, made.installation)  # boards tbhub did not stop
        with contextlib.suppress(Exception):
            made.compose("down", "--volumes", "--remove-orphans", "--timeout", "5")


def labelled(client: Any, label: str, value: str) -> list[Any]:
    return list(client.containers.list(all=True, filters={"label": f"{label}={value}"}))


def test_the_compose_stack_signs_in_through_nginx_serves_a_container_board_and_goes_away(
    stack: Stack, docker_client: Any
) -> None:
    stack.compose("up", "-d")  # waits for the database, then tbhub, to be healthy
    tls = ssl.create_default_context(cafile=str(stack.cert))
    with httpx.Client(base_url=stack.url, verify=tls, timeout=10) as browser:

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return browser.get("/healthz").status_code == 200
            return False

        wait_until(healthy, timeout=60, what="tbhub to answer through the stack's nginx")
        stack.tbhub("admin", "user", "create", "alice", "--password-stdin",
                    stdin="alice-password\n")  # fmt: skip
        stack.tbhub("admin", "project", "create", "vision", "--owner", "alice")
        write_project(stack.storage / "vision", runs=2, steps=20, tags=1)

        signed_in = post_sign_in(browser, "alice", "alice-password")
        assert signed_in.status_code == 303, signed_in.text
        assert "__Host-tbhub_session" in browser.cookies
        assert sorted(wait_for_board(browser, "vision").json()) == ["run-00", "run-01"]

    (board,) = labelled(docker_client, INSTALLATION, stack.installation)
    assert board.labels[PROJECT] == "vision" and board.status == "running"
    assert list(board.attrs["NetworkSettings"]["Networks"]) == [f"{stack.project}-boards"]
    assert board.attrs["Config"]["Image"] == stack_image(stack, "TBHUB_BOARD_IMAGE")

    stack.compose("down", "--volumes", "--remove-orphans", "--timeout", "30")
    assert labelled(docker_client, INSTALLATION, stack.installation) == []
    assert labelled(docker_client, COMPOSE_LABEL, stack.project) == []
    volumes = docker_client.volumes.list(filters={"label": f"{COMPOSE_LABEL}={stack.project}"})
    assert volumes == []
    assert docker_client.networks.list(names=[f"{stack.project}-boards"]) == []


def stack_image(stack: Stack, variable: str) -> str:
    for line in stack.env_file.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == variable:
            return value
    raise AssertionError(f"{variable} is not in {stack.env_file}")
