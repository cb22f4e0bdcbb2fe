"""A real `tbhub serve` (control plane, supervisor, nginx) to measure: one installation in
a directory of its own, with the bench user and project created through the `tbhub admin`
CLI and a signed-in session, on SQLite or on a scratch PostgreSQL database, its boards as
subprocesses or in containers."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from _places import HOST, PASSWORD, PROJECT, TBHUB_BIN, USER, free_port
from _processes import Group, answers_200, spawn, temp_dir, timed, wait_for
from _reports import log
from tbhub.core.processes import ProcessRef, stop_group


@dataclass
class Tbhub:
    """One tbhub installation in `root` (its data dir), serving `storage_root`."""

    root: Path
    storage_root: Path
    tbhub_bin: str = TBHUB_BIN
    extra_env: dict[str, str] = field(default_factory=dict)
    http_port: int = field(default_factory=free_port)
    api_port: int = field(default_factory=free_port)
    server: Group | None = None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.http_port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TBHUB_DATA_DIR": str(self.data_dir),
            "TBHUB_STORAGE_ROOT": str(self.storage_root),
            "TBHUB_HTTP_HOST": HOST,
            "TBHUB_HTTP_PORT": str(self.http_port),
            "TBHUB_API_PORT": str(self.api_port),
            "TBHUB_PUBLIC_URL": self.base_url,
            # Never pick up a tbhub.toml from the working directory.
            "TBHUB_CONFIG": str(self.root / "no-such-tbhub.toml"),
            **self.extra_env,
        }

    def cli(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [self.tbhub_bin, *args],
            input=stdin,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"tbhub {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
        return result.stdout

    def timed_cli(self, *args: str) -> float:
        """Seconds `tbhub <args>` takes in a fresh process, its output discarded."""
        return timed([self.tbhub_bin, *args], self.env)

    def set_up(self) -> None:
        """Schema, the bench user and the bench project (owned by it)."""
        self.cli("db", "upgrade")
        self.cli("admin", "user", "create", USER, "--password-stdin", stdin=PASSWORD + "\n")
        self.cli("admin", "project", "create", PROJECT, "--owner", USER)

    def start(self, timeout: float = 60.0) -> float:
        """Start `tbhub serve`; return once /healthz answers 200 through nginx."""
        assert self.server is None or not self.server.alive(), "already running"
        self.server = spawn(
            "tbhub serve", [self.tbhub_bin, "serve"], log_path=self.root / "serve.log", env=self.env
        )
        server = self.server
        with httpx.Client(timeout=1.0) as client:
            try:
                return wait_for(
                    answers_200(client, f"{self.base_url}/healthz"),
                    timeout=timeout,
                    what="tbhub serve to answer /healthz through nginx",
                    alive=server.alive,
                )
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}; its log ends:\n{server.log_tail()}") from None

    def alive(self) -> bool:
        """`tbhub serve` runs."""
        return self.server is not None and self.server.alive()

    def log_tail(self) -> str:
        return self.server.log_tail() if self.server is not None else ""

    @contextlib.contextmanager
    def serving(self, prepare: Callable[[], object] = lambda: None) -> Iterator[Tbhub]:
        """`set_up()`, `prepare()`, `start()`; stopped at the end. A RuntimeError on the way
        carries the end of serve's log."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.set_up()
            prepare()
            self.start()
            yield self
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; tbhub serve's log ends:\n{self.log_tail()}") from None
        finally:
            self.stop()

    def browser(self, cookie: str, *, timeout: float = 5.0) -> httpx.Client:
        """A client with a signed-in session that asks for JSON, as a board's page does."""
        headers = {"Cookie": f"tbhub_session={cookie}", "Accept": "application/json"}
        return httpx.Client(timeout=timeout, headers=headers)

    def wait_for_board(self, cookie: str, path: str, timeout: float = 180.0) -> None:
        """Until the bench board answers 200 at `path` through nginx (started on demand)."""
        with self.browser(cookie) as client:
            wait_for(answers_200(client, self.board_url(path)), timeout=timeout,
                     what=f"the board to answer {path} through nginx", interval=0.2)  # fmt: skip

    def direct_url(self, path: str) -> str:
        """`path` on the running bench board itself, not through nginx."""
        return f"http://{self.board_upstream()}/boards/{PROJECT}/{path.lstrip('/')}"

    def wait_for_zygote(self, timeout: float = 60.0) -> float:
        """Wait until the board zygote listens (it binds its socket once its imports are done)."""
        sock = self.data_dir / "zygote" / "zygote.sock"
        return wait_for(sock.exists, timeout=timeout, what=f"the board zygote to create {sock}")

    def stop(self) -> None:
        """SIGTERM to the serve process group (it stops its boards and nginx), then leftovers."""
        try:
            if self.server is not None:
                self.server.stop(sig=signal.SIGTERM, grace=40.0)
        finally:
            self.reap_leftovers()

    def reap_leftovers(self) -> None:
        """Boards and the nginx master live in their own sessions. If serve died without
        stopping them, stop their groups, found by PID + start time in tbhub's state files."""
        records = [
            *self.data_dir.glob("boards/*.json"),
            self.data_dir / "nginx" / "master.json",
            self.data_dir / "zygote" / "zygote.json",
        ]
        states = []
        for record in [*records, self.data_dir / "api-workers.json"]:
            try:
                state = json.loads(record.read_text())
            except (OSError, ValueError):
                continue
            states += [(record, entry) for entry in (state if isinstance(state, list) else [state])]
        for record, state in states:
            try:
                pid, create_time = int(state["pid"]), float(state["create_time"])
            except (ValueError, KeyError, TypeError):
                continue
            ref = ProcessRef(pid=pid, create_time=create_time)
            if ref.is_alive():
                log(f"  stopping leftover process group {pid} ({record.name})")
                stop_group(ref, grace=5.0, signals=(signal.SIGKILL,))

    def write_token(self) -> str:
        """A new API token of the bench user, with write access to the bench project."""
        made = self.cli("admin", "token", "create", "--user", USER, "--project", PROJECT,
                        "--scope", "write", "--json")  # fmt: skip
        return str(json.loads(made)["token"])

    def sign_in(self, user: str = USER, password: str = PASSWORD) -> str:
        """The tbhub_session cookie for `user` (the bench user), via the sign-in form."""
        with httpx.Client(base_url=self.base_url, timeout=10.0) as client:
            page = client.get("/auth/login")
            page.raise_for_status()
            token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
            response = client.post(
                "/auth/login",
                data={"username": user, "password": password, "csrf_token": token, "next": "/"},
            )
            if response.status_code != 303:
                raise RuntimeError(f"sign-in failed: {response.status_code} {response.text}")
            return str(client.cookies["tbhub_session"])

    def board_upstream(self) -> str:
        """host:port of the running board: from its state file (subprocess boards), else
        as the database records it (`tbhub admin board status`; boards in containers)."""
        for record in sorted(self.data_dir.glob("boards/*.json")):
            upstream = json.loads(record.read_text()).get("upstream")
            if upstream:
                return str(upstream)
        upstream = json.loads(self.cli("admin", "board", "status", PROJECT, "--json")).get(
            "upstream"
        )
        if not upstream:
            raise RuntimeError(f"no board of {PROJECT} has an upstream yet")
        return str(upstream)

    def board_url(self, path: str) -> str:
        return f"{self.base_url}/boards/{PROJECT}/{path.lstrip('/')}"


# -- boards in containers ---------------------------------------------------------------------


@contextlib.contextmanager
def docker_boards(upstream: str = "published") -> Iterator[dict[str, str]]:
    """The settings for boards in containers (TBHUB_BOARD_BACKEND=docker) under an
    installation id of this run, reached as `upstream` says (TBHUB_DOCKER_UPSTREAM), with
    the board image built first; every container and network labelled with that id is
    removed afterwards, nothing else."""
    import docker

    from tbhub.supervisor.backends.containers import remove_installation
    from tbhub.supervisor.board_image import build_board_image

    client = docker.from_env()
    built = build_board_image(client, progress=lambda line: log(f"  board image: {line}"))
    if built.built:
        log(f"built the board image {built.tag} in {built.seconds:.1f}s")
    installation = f"bench-{uuid.uuid4().hex[:10]}"
    try:
        yield {"TBHUB_BOARD_BACKEND": "docker", "TBHUB_INSTALLATION_ID": installation,
               "TBHUB_DOCKER_UPSTREAM": upstream}  # fmt: skip
    finally:
        remove_installation(client, installation)
        client.close()


# -- databases --------------------------------------------------------------------------------


def on_databases(
    kinds: str, measure: Callable[[str, str], dict[str, object]]
) -> list[dict[str, object]]:
    """`measure(kind, url)` on a new, empty database of each kind in `kinds` (comma-separated:
    postgresql, sqlite), each gone afterwards."""
    results = []
    for kind in kinds.split(","):
        with database_url(kind) as url:
            results.append(measure(kind, url))
    return results


def hub_on_database(root: Path, url: str) -> Tbhub:
    """A tbhub installation in `root`, its storage root in root/storage, on the database at
    `url`."""
    return Tbhub(root=root, storage_root=root / "storage", extra_env={"TBHUB_DATABASE_URL": url})


@contextlib.contextmanager
def database_url(kind: str) -> Iterator[str]:
    """A new, empty database of `kind` (postgresql or sqlite), gone afterwards."""
    if kind == "postgresql":
        # Imported here: tests/ is importable only once bench/_places.py has put the
        # repository root on sys.path, and import sorting puts it above that import.
        from tests.support.scratch_database import postgres_database

        with postgres_database(prefix="tbhub_bench_") as url:
            yield url
    else:
        with temp_dir("tbhub-bench-sqlite-") as db_dir:
            yield f"sqlite:///{db_dir / 'tbhub.sqlite3'}"
