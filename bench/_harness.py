"""What the benchmarks in bench/ share (bench/_ingest.py adds what the upload and discovery
benchmarks share).

- data built once and cached under the temp dir: sample data written with tbhub.storage.sample_logs,
  copied into a scratch storage root for each run;
- processes started in their own session and stopped by process group, never by name;
- a real `tbhub serve` (control plane, supervisor, nginx) on ports picked in 19000-19499
  (TBHUB_BENCH_PORTS=low-high moves them),
  with a user and a project created through the `tbhub admin` CLI and a signed-in session,
  on SQLite or on a scratch PostgreSQL database, boards as subprocesses or in containers;
- a bare TensorBoard on the same logdir, for comparison;
- wrk runs and what their output says;
- the command line, rounds of measurements (warm-up first), small statistics and reports.

Everything listens on and talks to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol, TypeVar

import httpx
from tests.support.scratch_database import postgres_database

from tbhub.core.processes import ProcessRef, stop_group
from tbhub.storage.sample_logs import write_project

HOST = "127.0.0.1"


def port_range(spec: str) -> range:
    """ "19000-19499" -> range(19000, 19500)."""
    low, high = (int(part) for part in spec.split("-"))
    return range(low, high + 1)


# TBHUB_BENCH_PORTS moves the benchmarks to other ports when several run on one machine.
PORT_RANGE = port_range(os.environ.get("TBHUB_BENCH_PORTS", "19000-19499"))
BIN_DIR = Path(sys.executable).parent
TBHUB_BIN = str(BIN_DIR / "tbhub")
TENSORBOARD_BIN = str(BIN_DIR / "tensorboard")
CACHE_ROOT = Path(tempfile.gettempdir()) / "tbhub-bench-cache"

PROJECT = "bench"
USER = "bench"
PASSWORD = "bench-password-not-secret"


# -- ports ------------------------------------------------------------------------------------

_handed_out: set[int] = set()


def free_port() -> int:
    """A port in PORT_RANGE nothing listens on now and this process has not handed out."""
    candidates = [p for p in PORT_RANGE if p not in _handed_out]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1}")


# -- sample data ------------------------------------------------------------------------------


def cached(key: str, build: Callable[[Path], str]) -> Path:
    """`<cache>/<key>/`, made once: `build(directory)` fills a staging directory and returns
    what its `complete` marker says; then it takes the place of any half-made copy an
    interrupted run left."""
    root = CACHE_ROOT / key
    if (root / "complete").exists():
        return root
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=CACHE_ROOT))
    try:
        started = time.monotonic()
        log(f"building {key} into {root} (once; cached for later runs) ...")
        (staging / "complete").write_text(build(staging))
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
        log(f"  done in {time.monotonic() - started:.1f}s")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def cached_logdir(*, runs: int, steps: int, tags: int) -> tuple[Path, list[str]]:
    """`<cache>/r<runs>-s<steps>-t<tags>/bench/`, holding `runs` runs; written on first use.

    The parent directory doubles as a tbhub storage root (its project `bench` is the logdir).
    Returns the logdir and the run names.
    """
    names = [f"run-{i:02d}" for i in range(runs)]

    def build(staging: Path) -> str:
        written = write_project(staging / PROJECT, runs=runs, steps=steps, tags=tags, prefix="run")
        assert written == names, (written, names)
        return f"{runs} runs x {steps} steps x {tags} tags\n"

    return cached(f"r{runs}-s{steps}-t{tags}", build) / PROJECT, names


def copied_logdir(work: Path, *, runs: int, steps: int, tags: int) -> tuple[Path, list[str]]:
    """A copy of the cached sample data as the bench project of a new storage root,
    work/storage (what a benchmark does there leaves the cache alone). Returns the storage
    root and the run names."""
    cached_dir, names = cached_logdir(runs=runs, steps=steps, tags=tags)
    storage = work / "storage"
    shutil.copytree(cached_dir, storage / PROJECT)
    return storage, names


# -- processes --------------------------------------------------------------------------------


@dataclass
class Group:
    """A child started in its own session; its PID is also its process-group id."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    ref: ProcessRef

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, sig: signal.Signals = signal.SIGTERM, grace: float = 30.0) -> None:
        """Signal the whole group, then SIGKILL whatever is left after `grace` seconds."""
        stop_group(self.ref, grace=grace, signals=(sig, signal.SIGKILL))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


def spawn(
    name: str, command: Sequence[str], *, log_path: Path, env: dict[str, str] | None = None
) -> Group:
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    return Group(name=name, process=process, log_path=log_path, ref=ProcessRef.of(process.pid))


def timed(command: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Seconds `command` takes to run to its end, its output discarded; a failure raises."""
    started = time.perf_counter()
    subprocess.run(list(command), env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


@contextlib.contextmanager
def temp_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- HTTP -------------------------------------------------------------------------------------


def wait_for(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.05,
    alive: Callable[[], bool] = lambda: True,
) -> float:
    """Call `predicate` every `interval` s until it holds; return the seconds it took."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if predicate():
            return time.monotonic() - started
        if not alive():
            raise RuntimeError(f"the process died while waiting for {what}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def runs_listed(client: httpx.Client, url: str, expected: Sequence[str]) -> Callable[[], bool]:
    """A predicate: GET `url` answers 200 with a JSON list holding every expected run."""
    want = set(expected)

    def check() -> bool:
        try:
            response = client.get(url)
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        try:
            runs = response.json()
        except ValueError:
            return False
        return isinstance(runs, list) and want <= set(runs)

    return check


def answers_200(client: httpx.Client, url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return client.get(url).status_code == 200
        except httpx.HTTPError:
            return False

    return check


# -- tbhub serve ------------------------------------------------------------------------------


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
        for record in records:
            try:
                state = json.loads(record.read_text())
                pid, create_time = int(state["pid"]), float(state["create_time"])
            except (OSError, ValueError, KeyError, TypeError):
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

    def sign_in(self) -> str:
        """The tbhub_session cookie for the bench user, via the sign-in form."""
        with httpx.Client(base_url=self.base_url, timeout=10.0) as client:
            page = client.get("/auth/login")
            page.raise_for_status()
            token = page.text.split('name="csrf_token" value="')[1].split('"')[0]
            response = client.post(
                "/auth/login",
                data={"username": USER, "password": PASSWORD, "csrf_token": token, "next": "/"},
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
def docker_boards() -> Iterator[dict[str, str]]:
    """The settings for boards in containers (TBHUB_BOARD_BACKEND=docker) under an
    installation id of this run, with the board image built first; every container and
    network labelled with that id is removed afterwards, nothing else."""
    import docker

    from tbhub.supervisor.backends.containers import remove_installation
    from tbhub.supervisor.board_image import build_board_image

    client = docker.from_env()
    built = build_board_image(client, progress=lambda line: log(f"  board image: {line}"))
    if built.built:
        log(f"built the board image {built.tag} in {built.seconds:.1f}s")
    installation = f"bench-{uuid.uuid4().hex[:10]}"
    try:
        yield {"TBHUB_BOARD_BACKEND": "docker", "TBHUB_INSTALLATION_ID": installation}
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
        with postgres_database(prefix="tbhub_bench_") as url:
            yield url
    else:
        with temp_dir("tbhub-bench-sqlite-") as db_dir:
            yield f"sqlite:///{db_dir / 'tbhub.sqlite3'}"


# -- bare TensorBoard -------------------------------------------------------------------------


def bare_tensorboard(logdir: Path, port: int, log_path: Path) -> Group:
    """`tensorboard --logdir <logdir> --load_fast=true --port <port> --host 127.0.0.1`."""
    command = [
        TENSORBOARD_BIN,
        "--logdir", str(logdir),
        "--load_fast=true",
        "--port", str(port),
        "--host", HOST,
    ]  # fmt: skip
    return spawn("tensorboard", command, log_path=log_path)


def ready_bare_tensorboard(
    logdir: Path, names: Sequence[str], log_path: Path, *, timeout: float, interval: float = 0.05
) -> tuple[Group, float]:
    """A bare TensorBoard on `logdir` once its /data/runs lists every run in `names`, and the
    seconds from spawning it to that answer. Stopped if it does not get there."""
    port = free_port()
    url = f"http://{HOST}:{port}/data/runs"
    started = time.monotonic()
    board = bare_tensorboard(logdir, port, log_path)
    try:
        with httpx.Client(timeout=5.0) as client:
            what = f"bare TensorBoard to list {len(names)} runs"
            wait_for(runs_listed(client, url, names), timeout=timeout, what=what,
                     interval=interval, alive=board.alive)  # fmt: skip
        return board, time.monotonic() - started
    except BaseException as exc:
        board.stop()
        if isinstance(exc, RuntimeError):
            raise RuntimeError(f"{exc}; its log ends:\n{board.log_tail()}") from None
        raise


# -- wrk --------------------------------------------------------------------------------------

WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass
class WrkReport:
    """What wrk printed: its summary, read from `text`."""

    text: str

    def _find(self, pattern: str) -> re.Match[str] | None:
        return re.search(pattern, self.text, re.MULTILINE)

    @property
    def requests_per_s(self) -> float | None:
        found = self._find(r"^Requests/sec:\s+([\d.]+)")
        return float(found.group(1)) if found else None

    @property
    def requests(self) -> int | None:
        found = self._find(r"^\s*(\d+) requests in")
        return int(found.group(1)) if found else None

    @property
    def non_2xx_3xx(self) -> int:
        found = self._find(r"Non-2xx or 3xx responses:\s+(\d+)")
        return int(found.group(1)) if found else 0

    @property
    def socket_errors(self) -> str | None:
        """wrk's count of each kind ("connect 0, read 2, write 0, timeout 1"), or None."""
        found = self._find(r"Socket errors:\s+(.+)")
        return found.group(1).strip() if found else None

    @property
    def failed(self) -> int:
        """Non-2xx/3xx answers plus socket errors of every kind."""
        errors = self.socket_errors
        return self.non_2xx_3xx + sum(int(n) for n in re.findall(r"\d+", errors or ""))

    @property
    def failures(self) -> str:
        """wrk's own lines for what failed, or "no errors reported"."""
        parts = []
        if self._find(r"Non-2xx or 3xx responses:"):
            parts.append(f"Non-2xx or 3xx responses: {self.non_2xx_3xx}")
        if self.socket_errors is not None:
            parts.append(f"Socket errors: {self.socket_errors}")
        return " ".join(parts) or "no errors reported"

    def latency_ms(self, percent: str) -> float:
        """A percentile of the latency distribution (`wrk --latency`), in ms."""
        found = self._find(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s)")
        if found is None:
            raise RuntimeError(f"no {percent}% latency in wrk's output:\n{self.text}")
        return float(found.group(1)) * WRK_UNITS[found.group(2)]


def start_wrk(
    url: str, *, threads: int, connections: int, duration: int, log_path: Path,
    headers: dict[str, str] | None = None, options: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> Group:  # fmt: skip
    """`wrk -t<threads> -c<connections> -d<duration>s [options] [-H header]... <url>
    [-- script_args...]`."""
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", *options]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    command.append(url)
    if script_args:
        command += ["--", *script_args]
    return spawn("wrk", command, log_path=log_path)


def stop_wrk(wrk: Group) -> WrkReport:
    """Stop a wrk that runs on; it prints its summary when it gets SIGINT."""
    stop_group(wrk.ref, grace=10.0, signals=(signal.SIGINT, signal.SIGKILL))
    return WrkReport(wrk.log_path.read_text(errors="replace"))


def run_wrk(
    url: str, *, threads: int, connections: int, duration: int, log_path: Path,
    headers: dict[str, str] | None = None, options: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> WrkReport:  # fmt: skip
    """One wrk run to its end; a failed run (exit code, no request count or rate) raises."""
    wrk = start_wrk(url, threads=threads, connections=connections, duration=duration,
                    log_path=log_path, headers=headers, options=options,
                    script_args=script_args)  # fmt: skip
    try:
        code = wrk.process.wait(timeout=duration + 60)
    finally:
        wrk.stop()
    report = WrkReport(wrk.log_path.read_text(errors="replace"))
    if code != 0 or report.requests_per_s is None or report.requests is None:
        raise RuntimeError(f"wrk failed (exit {code}):\n{report.text}")
    return report


# -- command line and rounds ------------------------------------------------------------------


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low`."""

    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}")
        return value

    return parse


def subset_of(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated, non-empty subset of `allowed`, in the order given."""

    def parse(text: str) -> list[str]:
        chosen = [name for name in text.split(",") if name]
        if not chosen or set(chosen) - set(allowed):
            raise argparse.ArgumentTypeError(f"takes a comma-separated subset of {allowed}")
        return chosen

    return parse


def arguments(
    doc: str, *, runs: int | None = None, warmup: int | None = None, json: bool = True,
    tbhub_bin: bool = False, databases: str | None = None,
) -> argparse.ArgumentParser:  # fmt: skip
    """A benchmark's parser, described by the first paragraph of its docstring, with the
    options it shares with others: --runs, --warmup, --databases (given their defaults),
    --json, and --tbhub-bin (the executable to measure, for A/B tests)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if runs is not None:
        parser.add_argument("--runs", type=at_least(1), default=runs, help="measured runs")
    if warmup is not None:
        parser.add_argument(
            "--warmup", type=at_least(0), default=warmup, help="unmeasured warm-up first"
        )
    if json:
        parser.add_argument("--json", action="store_true", help="print the results as JSON")
    if databases is not None:
        parser.add_argument(
            "--databases", default=databases, help="postgresql and/or sqlite, comma-separated"
        )
    if tbhub_bin:
        parser.add_argument(
            "--tbhub-bin", default=TBHUB_BIN, help="the tbhub executable to measure (A/B tests)"
        )
    return parser


S = TypeVar("S")


def timed_rounds(
    repeats: int, sides: Sequence[str], measure: Callable[[int], dict[str, float]],
    describe: Callable[[dict[str, float]], str],
) -> tuple[dict[str, list[float]], dict[str, float]]:  # fmt: skip
    """One unmeasured warm-up round, then `repeats` measured ones, each `measure(index)`:
    seconds per side. Returns every measured round's seconds per side, and their medians."""
    rounds = measure_rounds(repeats, 1, lambda index, _label: [measure(index)], describe)
    results = {side: [r[side] for r in rounds] for side in sides}
    return results, {side: median(seconds) for side, seconds in results.items()}


def measure_rounds(
    repeats: int, warmup: int, measure: Callable[[int, str], list[S]],
    describe: Callable[[S], str], noun: str = "run",
) -> list[S]:  # fmt: skip
    """`warmup` unmeasured rounds (index <= 0), then rounds 1..`repeats`; each round's samples
    logged, the measured ones returned. `measure(index, label)`: `label` names the round in
    file names ("3", "warmup0")."""
    samples: list[S] = []
    for index in range(1 - warmup, repeats + 1):
        label = f"{index}" if index > 0 else f"warmup{-index}"
        measured = measure(index, label)
        tag = "warm-up" if index <= 0 else f"{noun} {index}/{repeats}"
        log(f"{tag}: " + ", ".join(describe(sample) for sample in measured))
        if index > 0:
            samples += measured
    return samples


class Kinded(Protocol):
    @property
    def kind(self) -> str: ...


K = TypeVar("K", bound=Kinded)


def medians(
    samples: Sequence[K], kinds: Sequence[str], value: Callable[[K], float]
) -> dict[str, float]:
    """The median `value` of the samples of each kind."""
    return {kind: median([value(s) for s in samples if s.kind == kind]) for kind in kinds}


# -- reporting --------------------------------------------------------------------------------


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def percentile(values: Sequence[float], q: float) -> float:
    """The value below which a share `q` of `values` lies (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def emit_json(data: dict[str, Any], stream: IO[str] = sys.stdout) -> None:
    json.dump(data, stream, indent=2)
    stream.write("\n")


def report(result: dict[str, Any], *, as_json: bool, text: str, to_log: bool = False) -> None:
    """The results: as JSON with --json, else `text` for people, on stdout (or with
    `to_log`, on stderr with the progress lines)."""
    if as_json:
        emit_json(result)
    elif to_log:
        log(text)
    else:
        print(text)


def emit_report(
    benchmark: str, *, data: dict[str, Any], samples: Sequence[Any], n: int, summary: str,
    **figures: Any,
) -> None:  # fmt: skip
    """A benchmark's results as JSON: its name, the data it ran on, every sample (dataclasses),
    its `figures`, the number of measured runs and the one-line summary."""
    emit_json({"benchmark": benchmark, "data": data, "samples": [asdict(s) for s in samples],
               **figures, "n": n, "summary": summary})  # fmt: skip
