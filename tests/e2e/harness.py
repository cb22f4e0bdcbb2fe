"""Run a real `tbhub serve` (nginx, supervisor, TensorBoard) for a test, and clean up after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
from sqlalchemy.orm import Session

from tbhub.auth.tokens import create_token
from tbhub.core.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.core.models import TokenScope
from tbhub.core.processes import ProcessRef, stop_group
from tbhub.domain.projects import create_project
from tbhub.domain.users import create_user, get_user
from tbhub.storage.sample_logs import write_project
from tbhub.supervisor.backends.local import INSTANCE_ENV, OWNER_ENV
from tests.forms import csrf_header, post_sign_in
from tests.ports import free_port

TBHUB = str(Path(sys.executable).with_name("tbhub"))


def wait_until(predicate: Callable[[], object], *, timeout: float, what: str) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_answering(
    process: subprocess.Popen[bytes], url: str, *, what: str, log: Callable[[], str]
) -> None:
    """Wait until `url` answers 200; fail with the log if `process` exits first."""

    def answering() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited:\n{log()}")
        try:
            return httpx.get(url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(answering, timeout=30, what=f"{what} to answer {url}")


def board_processes(state_dir: Path, instance: str = "") -> list[psutil.Process]:
    """Every live process carrying the board label of this board state dir (and a board
    instance id starting with `instance`). One that exits meanwhile, or is a zombie not yet
    reaped, is not live."""
    found = []
    for process in psutil.process_iter():
        try:
            environ = process.environ()
        except psutil.Error:
            continue
        if environ.get(OWNER_ENV) == str(state_dir) and environ.get(
            "TBHUB_INSTANCE", ""
        ).startswith(instance):
            found.append(process)
    return found


class TbhubServer:
    def __init__(self, root: Path, database_url: str, **settings: str) -> None:
        self.database_url = database_url
        self._migrated = False  # db() has run `alembic upgrade head` once
        self.data_dir = root / "data"
        self.storage = root / "storage"
        self.http_port = free_port()
        self.api_port = free_port()
        self.env = {
            **os.environ,
            "TBHUB_DATA_DIR": str(self.data_dir),
            "TBHUB_STORAGE_ROOT": str(self.storage),
            "TBHUB_DATABASE_URL": database_url,
            "TBHUB_HTTP_PORT": str(self.http_port),
            "TBHUB_API_PORT": str(self.api_port),
            "TBHUB_PUBLIC_URL": f"http://127.0.0.1:{self.http_port}",
            "TBHUB_RECONCILE_INTERVAL": "1",
            "TBHUB_BOARD_STOP_GRACE": "3",
            "TBHUB_CONFIG": str(root / "absent.toml"),
            # One process unless a test asks for more (`--workers`): the default is one a
            # core, and most tests start servers for what the count does not change.
            "TBHUB_API_WORKERS": "1",
            **{f"TBHUB_{k.upper()}": v for k, v in settings.items()},
        }
        # Replicas of one installation share these (tests/e2e/test_replicas.py).
        self.storage = Path(self.env["TBHUB_STORAGE_ROOT"])
        self.board_state_dir = Path(self.env.get("TBHUB_BOARD_STATE_DIR", self.data_dir / "boards"))
        root.mkdir(parents=True, exist_ok=True)
        self.log_path = root / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.clients: list[httpx.Client] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def cli(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [TBHUB, *args], input=stdin, env=self.env, capture_output=True, text=True, timeout=60
        )
        if check and result.returncode != 0:
            raise AssertionError(f"tbhub {' '.join(args)} failed: {result.stderr}")
        return result

    def start(self, *serve_args: str) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the child's exit
        self.process = subprocess.Popen(
            [TBHUB, "serve", *serve_args], env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        log.close()
        wait_answering(self.process, f"{self.base_url}/healthz", what="tbhub serve", log=self.log)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        """SIGTERM, as an operator would; the server stops its boards and nginx."""
        if self.process is None:
            return
        if self.process.poll() is None:
            ref = ProcessRef.of(self.process.pid)
            stop_group(ref, grace=20, signals=(signal.SIGTERM, signal.SIGKILL))
        self.process.wait(timeout=5)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server process alone, leaving nginx and boards as a crash would."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=5)
        self.process = None

    def cleanup(self) -> None:
        """Whatever happened in the test, leave no process of ours behind."""
        print(f"--- tbhub serve log ({self.log_path}) ---\n{self.log()}")  # shown on failure
        nginx_errors = self.data_dir / "nginx" / "logs" / "nginx-error.log"
        if nginx_errors.exists():
            print(f"--- nginx error log ---\n{nginx_errors.read_text(errors='replace')}")
        for client in self.clients:
            client.close()
        try:
            self.stop()
        finally:
            for process in board_processes(self.board_state_dir):
                try:
                    label = (INSTANCE_ENV, process.environ().get(INSTANCE_ENV, ""))
                    ref = ProcessRef(process.pid, process.create_time())
                except psutil.Error:  # gone (or a zombie) since it was listed
                    continue
                stop_group(ref, grace=2, label=label)
            master = self.data_dir / "nginx" / "master.json"
            if master.exists():
                ref = ProcessRef(**json.loads(master.read_text()))
                if ref.is_alive():
                    stop_group(ref, grace=2, signals=(signal.SIGQUIT, signal.SIGKILL))
            workers = self.data_dir / "api-workers.json"
            if workers.exists():
                for entry in json.loads(workers.read_text()):
                    ref = ProcessRef(**entry)
                    if ref.is_alive():
                        stop_group(ref, grace=2, signals=(signal.SIGTERM, signal.SIGKILL))
            zygote = self.data_dir / "zygote" / "zygote.json"
            if zygote.exists():
                ref = ProcessRef(**json.loads(zygote.read_text()))
                if ref.is_alive():
                    stop_group(ref, grace=2, signals=(signal.SIGTERM, signal.SIGKILL))

    # -- users and sessions ---------------------------------------------------------------

    @contextmanager
    def db(self) -> Iterator[Session]:
        """A session on the server's database, to seed it faster than the CLI would."""
        if not self._migrated:
            upgrade(self.database_url)
            self._migrated = True
        engine = make_engine(self.database_url)
        try:
            with transaction(make_session_factory(engine)) as session:
                yield session
        finally:
            engine.dispose()

    def add_user(self, name: str, password: str, *, admin: bool = False) -> None:
        with self.db() as session:
            create_user(session, name=name, password=password, is_admin=admin, actor="test")

    def add_project(self, name: str, *, owner: str | None = None) -> Path:
        self.storage.mkdir(parents=True, exist_ok=True)
        with self.db() as session:
            create_project(session, name=name, storage_root=self.storage, owner=owner, actor="test")
        return self.storage / name

    def add_token(self, user: str, projects: list[str], *, scope: str = "write") -> str:
        """A token of `user` for `projects`; returns the secret."""
        with self.db() as session:
            _row, secret = create_token(
                session, user=get_user(session, name=user), name=f"{user}-{scope}",
                scope=TokenScope(scope), projects=projects, expires_at=None, actor="test",
            )  # fmt: skip
        return secret

    def token_client(self, secret: str) -> httpx.Client:
        client = self.client()
        client.headers["Authorization"] = f"Bearer {secret}"
        return client

    def start_with_alice(self, *, runs: int = 2) -> TbhubServer:
        """alice owns project vision with `runs` small runs; then the server starts."""
        self.add_user("alice", "alice-password")
        write_project(self.add_project("vision", owner="alice"), runs=runs, steps=20, tags=1)
        self.start()
        return self

    def client(self) -> httpx.Client:
        client = httpx.Client(base_url=self.base_url, timeout=10)
        self.clients.append(client)
        return client

    def sign_in(self, name: str, password: str) -> httpx.Client:
        client = self.client()
        response = post_sign_in(client, name, password)
        assert response.status_code == 303, response.text
        csrf_header(client)
        return client
