"""The deploy files are valid for the programs that read them."""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
import secrets
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tbhub.core.settings import Settings, load_settings
from tbhub.serve.nginx import find_nginx
from tests.deploy.sites import DEPLOY, runnable_site
from tests.e2e.harness import TBHUB
from tests.ports import free_port

REPO = DEPLOY.parent
UNIT = DEPLOY / "systemd" / "tbhub@.service"
INSTALLED_TBHUB = "/opt/tbhub/venv/bin/tbhub"
# The blanks of .env.example: the secrets an operator fills in (the file's header says so).
OPERATOR_SECRETS = ["TBHUB_SECRET_KEY", "POSTGRES_PASSWORD"]
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z_][A-Z0-9_]*)(?:(?P<op>:-|:\?)(?P<rest>[^}]*))?\}")
# Where Docker numbers networks it is not given a subnet for (libnetwork's local-scope
# defaults): a pinned subnet inside one can be taken first by another network.
DOCKER_DEFAULT_POOLS = [ipaddress.ip_network("172.17.0.0/16"),
                        ipaddress.ip_network("172.18.0.0/15"),
                        ipaddress.ip_network("172.20.0.0/14"),
                        ipaddress.ip_network("172.24.0.0/13"),
                        ipaddress.ip_network("192.168.0.0/16")]  # fmt: skip


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines as systemd (and sh) read them: one layer of quotes stripped."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split("=", 1)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[key] = value
    return values


def test_the_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is missing (Debian: apt-get install systemd)")
    text = UNIT.read_text()
    # verify checks that ExecStart names a program: point it at this checkout's tbhub.
    unit = tmp_path / "tbhub@main.service"
    unit.write_text(text.replace(INSTALLED_TBHUB, TBHUB) if INSTALLED_TBHUB in text else "")
    result = subprocess.run(
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    # It exits 0 on unknown keys and bad values too, and only says so: any output fails.
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_the_systemd_environment_file_holds_valid_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    values = env_file(DEPLOY / "systemd" / "tbhub.env.example")
    known = {f"TBHUB_{name.upper()}" for name in Settings.model_fields}
    assert values and [key for key in values if key not in known] == []
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "absent.toml"))
    for key, value in values.items():  # the blanks are the operator's secrets to fill in
        monkeypatch.setenv(key, value or "x" * 64)
    load_settings()  # raises ConfigError naming any value its setting refuses


def test_the_tls_site_passes_nginx_t(tmp_path: Path) -> None:
    config, _cert = runnable_site(
        tmp_path, https_port=free_port(), http_port=free_port(), replicas=[free_port()]
    )
    result = subprocess.run(
        [find_nginx("nginx"), "-t", "-p", str(tmp_path), "-c", str(config),
         "-e", str(tmp_path / "error.log")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_compose_file_with_the_example_env_gives_tbhub_valid_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    compose = shutil.which("docker-compose")
    if compose is None:
        pytest.skip("docker-compose is missing (deploy/install-system-deps.sh test)")
    example = env_file(REPO / ".env.example")
    used = (REPO / "docker-compose.yml").read_text()
    assert [key for key in example if f"${{{key}" not in used] == ["COMPOSE_PROJECT_NAME"]
    # A copy as the file's header says to make it: the two secrets filled in, nothing else.
    assert [key for key, value in example.items() if not value] == OPERATOR_SECRETS
    filled = tmp_path / "filled.env"
    filled.write_text("".join(f"{k}={v or secrets.token_hex(32)}\n" for k, v in example.items()))
    result = subprocess.run(
        [compose, "--project-directory", str(REPO), "--file", str(REPO / "docker-compose.yml"),
         "--env-file", str(filled), "config"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    environment = yaml.safe_load(result.stdout)["services"]["tbhub"]["environment"]
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "absent.toml"))
    for key, value in environment.items():
        monkeypatch.setenv(key, str(value))
    settings = load_settings()  # raises ConfigError naming any value its setting refuses
    assert settings.board_backend == "docker" and settings.local_login
    assert not settings.oidc_enabled  # shipped off: its lines are there, commented out
    assert "# TBHUB_OIDC_CLIENT_SECRET=" in (REPO / ".env.example").read_text()


def substituted(text: str, values: dict[str, str]) -> str:
    """docker-compose's ${VAR}, ${VAR:-default} and ${VAR:?message} with `values`."""

    def one(match: re.Match[str]) -> str:
        name, op, rest = match["name"], match["op"], match["rest"]
        if values.get(name):
            return values[name]
        assert op != ":?", f"{name} must be set: {rest}"
        return rest if op == ":-" else ""

    return VARIABLE.sub(one, text)


@pytest.mark.parametrize("env", ["defaults", ".env.example"])
def test_every_network_of_the_compose_stack_has_a_subnet_of_its_own_outside_dockers_pools(
    env: str,
) -> None:
    values = env_file(REPO / ".env.example") if env == ".env.example" else {}
    values |= {"TBHUB_SECRET_KEY": "s", "POSTGRES_PASSWORD": "p"}
    values |= {k: "x" for k in ("TBHUB_PUBLIC_URL", "TBHUB_STORAGE_PATH", "TBHUB_TLS_DIR")}
    stack = yaml.safe_load(substituted((REPO / "docker-compose.yml").read_text(), values))
    subnets = {}
    for name, network in stack["networks"].items():
        [config] = (network or {}).get("ipam", {}).get("config", [{}])
        assert "subnet" in config, f"network {name} has no pinned subnet"
        subnets[name] = ipaddress.ip_network(config["subnet"])
    assert set(subnets) == {n for s in stack["services"].values() for n in s["networks"]}
    for (a, net_a), (b, net_b) in itertools.combinations(subnets.items(), 2):
        assert not net_a.overlaps(net_b), f"{a} {net_a} overlaps {b} {net_b}"
    for name, net in subnets.items():
        clash = [pool for pool in DOCKER_DEFAULT_POOLS if net.overlaps(pool)]
        assert clash == [], f"{name} {net} lies in Docker's default pool {clash}"
    trusted = stack["services"]["tbhub"]["environment"]["TBHUB_TRUSTED_PROXIES"]
    assert json.loads(trusted) == [str(subnets["front"])]


def test_every_piped_docker_compose_exec_has_no_terminal() -> None:
    for path in (REPO / "docker-compose.yml", REPO / "README.md", *(REPO / "docs").rglob("*.md")):
        for line in path.read_text().splitlines():
            if "docker-compose exec" in line:
                assert "exec -T " in line, f"{path.name}: {line.strip()}"
