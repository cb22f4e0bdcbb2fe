"""The soak's users and writers: a load balancer in front of the replicas, readers that
follow a board page's XHR pattern through nginx, and writers that register runs, append
scalars with TensorBoard's own event writer and upload runs with `tbhub upload`.

Every answer is counted by status. A 503 with Retry-After (a board starting, the database
busy) is what a page waits on and retries, so it is counted apart and retried. A replica
that is down (its `/healthz` fails: the soak killed it) is what a load balancer sends no
request to; a request that reached it anyway is retried on another replica, as a load
balancer's retry of a dead backend does, and counted apart as a failover. Any other 5xx,
or a transport error from a replica that is up, is one a user sees.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from _places import TBHUB_BIN
from _tbhub import Tbhub
from tbhub.storage.sample_logs import scalar_value

JSON = {"Accept": "application/json"}
TAGS = 2
GIVE_UP_S = 120.0  # a page that waits this long for its board has failed


@dataclass
class Tally:
    """What every client saw, shared by all threads (under `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: Counter[int] = field(default_factory=Counter)
    starting_503: int = 0  # 503 with Retry-After: retried, not an error
    failovers: int = 0  # a request that reached a killed replica, retried on another
    user_visible: list[str] = field(default_factory=list)  # 5xx and errors a user saw

    def count(self, status: int) -> None:
        with self.lock:
            self.statuses[status] += 1

    def note(self, what: str) -> None:
        with self.lock:
            self.user_visible.append(what)

    def bump(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


class Balancer:
    """Round robin over the replicas whose `/healthz` answers 200 (checked every second)."""

    def __init__(self, replicas: list[Tbhub]) -> None:
        self.replicas = replicas
        self.up = {id(r): True for r in replicas}
        self._stop = threading.Event()
        self._turn = 0
        self._client = httpx.Client(timeout=2.0)
        self._thread = threading.Thread(target=self._watch, name="soak-balancer", daemon=True)
        self._thread.start()

    def healthy(self, replica: Tbhub) -> bool:
        try:
            return self._client.get(f"{replica.base_url}/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            for replica in self.replicas:
                self.up[id(replica)] = self.healthy(replica)

    def pick(self) -> Tbhub:
        live = [r for r in self.replicas if self.up[id(r)]] or self.replicas
        self._turn += 1
        return live[self._turn % len(live)]

    def mark_down_if_dead(self, replica: Tbhub) -> bool:
        """Whether `replica` is down now (then it leaves the rotation until it answers)."""
        if self.healthy(replica):
            return False
        self.up[id(replica)] = False
        return True

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._client.close()


def request(
    client: httpx.Client, balancer: Balancer, tally: Tally, method: str, path: str,
    stop: threading.Event, **kwargs: object,
) -> httpx.Response | None:  # fmt: skip
    """One user request through the balancer, retried as a page or a load balancer would;
    None when it failed in a way a user saw (counted) or the soak is stopping."""
    deadline = time.monotonic() + GIVE_UP_S
    while time.monotonic() < deadline and not stop.is_set():
        replica = balancer.pick()
        try:
            response = client.request(method, replica.base_url + path, **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError as exc:
            if balancer.mark_down_if_dead(replica):
                tally.bump("failovers")
                continue
            tally.note(f"{method} {path}: {type(exc).__name__} from a live replica")
            return None
        tally.count(response.status_code)
        if response.status_code == 503 and "retry-after" in response.headers:
            tally.bump("starting_503")
            stop.wait(min(2.0, float(response.headers["retry-after"])))
            continue
        if response.status_code >= 500:
            if balancer.mark_down_if_dead(replica):
                tally.bump("failovers")
                continue
            tally.note(f"{method} {path}: {response.status_code} {response.text[:200]!r}")
            return None
        return response
    if not stop.is_set():
        tally.note(f"{method} {path}: no answer but 503 (Retry-After) for {GIVE_UP_S:.0f}s")
    return None


# -- readers ----------------------------------------------------------------------------------


def read_boards(
    cookie: str, projects: list[str], balancer: Balancer, tally: Tally, stop: threading.Event,
    seed: int,
) -> None:  # fmt: skip
    """One signed-in user: open a board as its page does (environment, runs, plugins
    listing, scalar tags, then every run x tag series), reload it a few times as the page's
    auto-reload does, then go to another of their boards."""
    rng = random.Random(seed)
    with httpx.Client(timeout=30.0, cookies={"tbhub_session": cookie}, headers=JSON) as client:
        while not stop.is_set():
            board = f"/boards/{rng.choice(projects)}"

            def get(path: str, board: str = board, **params: str) -> httpx.Response | None:
                return request(client, balancer, tally, "GET", f"{board}/{path}", stop,
                               params=params)  # fmt: skip

            if get("data/environment") is None or stop.is_set():
                continue
            for _reload in range(rng.randint(2, 5)):
                if get("data/runs") is None or get("data/plugins_listing") is None:
                    break
                tags = get("data/plugin/scalars/tags")
                if tags is None or tags.status_code != 200:
                    break
                for run, by_tag in sorted(tags.json().items())[:6]:
                    for tag in sorted(by_tag)[:TAGS]:
                        get("data/plugin/scalars/scalars", run=run, tag=tag)
                if stop.wait(rng.uniform(1.0, 4.0)):
                    return


# -- writers ----------------------------------------------------------------------------------


@dataclass
class WrittenRun:
    """A run a writer wrote: where, and every step it flushed (each with TAGS scalars)."""

    project: str
    logdir: Path
    steps: list[int] = field(default_factory=list)
    how: str = "events"  # or "upload"


@dataclass
class Writing:
    runs: list[WrittenRun] = field(default_factory=list)
    registrations: int = 0
    uploads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, run: WrittenRun) -> None:
        with self.lock:
            self.runs.append(run)


def summary(run_index: int, step: int) -> Event:
    values = [Summary.Value(tag=f"metric/{t}", simple_value=scalar_value(run_index, t, step))
              for t in range(TAGS)]  # fmt: skip
    return Event(wall_time=time.time(), step=step, summary=Summary(value=values))


def register(
    client: httpx.Client, balancer: Balancer, tally: Tally, project: str, name: str,
    storage: Path, stop: threading.Event,
) -> Path | None:  # fmt: skip
    """Register run `name` through the API; its log directory on the shared storage."""
    response = request(client, balancer, tally, "POST", f"/api/v1/projects/{project}/runs",
                       stop, json={"name": name})  # fmt: skip
    if response is None:
        return None
    if response.status_code != 201:
        tally.note(f"POST runs {name}: {response.status_code} {response.text[:200]!r}")
        return None
    logdir = Path(str(response.json()["logdir"]))
    return logdir if logdir.is_absolute() else storage / project / logdir


def upload(
    hub: Tbhub, token: str, project: str, source: Path, name: str, work: Path
) -> dict[str, object] | str:
    """`tbhub upload SOURCE --project P --name N --finish --json`: its JSON, or its error."""
    env = {**os.environ, "TBHUB_URL": hub.base_url, "TBHUB_TOKEN": token,
           "TBHUB_CLIENT_CONFIG": str(work / f"client-{name}.json")}  # fmt: skip
    command = [TBHUB_BIN, "upload", str(source), "--project", project, "--name", name,
               "--finish", "--json"]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    parsed: dict[str, object] = json.loads(done.stdout)
    return parsed


def write_runs(
    number: int, token: str, projects: list[str], storage: Path, balancer: Balancer,
    tally: Tally, writing: Writing, stop: threading.Event, work: Path,
    run_seconds: float, upload_every: int,
) -> None:  # fmt: skip
    """Writer `number`: register a run, append a step every 0.5 s for `run_seconds`
    (flushed every second; only flushed steps count as written), then the next run; the second of
    every `upload_every` runs is written locally instead and sent with `tbhub upload`."""
    rng = random.Random(number)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30.0, headers=headers) as client:
        for index in range(1_000_000):
            if stop.is_set():
                return
            project = rng.choice(projects)
            name = f"w{number:02d}-{index:03d}"
            if upload_every and index % upload_every == 1:
                upload_one(number, index, token, project, name, balancer, tally, writing, work)
                continue
            logdir = register(client, balancer, tally, project, name, storage, stop)
            if logdir is None:
                continue
            writing.registrations += 1
            run = WrittenRun(project, logdir)
            writing.add(run)
            append_steps(run, number * 1000 + index, run_seconds, stop)


def append_steps(run: WrittenRun, run_index: int, seconds: float, stop: threading.Event) -> None:
    writer = EventFileWriter(str(run.logdir), max_queue_size=1000, flush_secs=3600)
    pending: list[int] = []
    ends = time.monotonic() + seconds
    try:
        step = 0
        while time.monotonic() < ends and not stop.is_set():
            writer.add_event(summary(run_index, step))
            pending.append(step)
            step += 1
            if step % 2 == 0:
                writer.flush()
                run.steps += pending
                pending = []
            stop.wait(0.5)
    finally:
        writer.close()  # flushes what is pending
        run.steps += pending


def upload_one(
    number: int, index: int, token: str, project: str, name: str, balancer: Balancer,
    tally: Tally, writing: Writing, work: Path,
) -> None:  # fmt: skip
    """Write a 200-step run locally, then upload it; retried on another replica when the
    one it went to was killed meanwhile (the upload resumes: only what is missing goes)."""
    source = work / "uploads" / name
    source.mkdir(parents=True)
    writer = EventFileWriter(str(source), max_queue_size=1000, flush_secs=3600)
    for step in range(200):
        writer.add_event(summary(number * 1000 + index, step))
    writer.close()
    for _attempt in range(3):
        hub = balancer.pick()
        sent = upload(hub, token, project, source, name, work)
        if isinstance(sent, dict):
            break
        if not balancer.mark_down_if_dead(hub):
            tally.note(f"tbhub upload {name}: {sent}")
            return
        tally.bump("failovers")
    else:
        tally.note(f"tbhub upload {name}: failed on every replica")
        return
    writing.uploads += 1
    where = run_path(balancer, token, project, sent["run"])
    if where is None:
        tally.note(f"tbhub upload {name}: run {sent['run']} not found through the API")
        return
    writing.add(WrittenRun(project, where, list(range(200)), how="upload"))


def run_path(balancer: Balancer, token: str, project: str, run: object) -> Path | None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=30.0, headers=headers) as client:
        response = client.get(f"{balancer.pick().base_url}/api/v1/projects/{project}/runs/{run}")
    if response.status_code != 200:
        return None
    logdir = Path(str(response.json()["logdir"]))
    return logdir if logdir.is_absolute() else balancer.replicas[0].storage_root / project / logdir


def threads_of(targets: list[Callable[[], None]], name: str) -> list[threading.Thread]:
    started = []
    for index, target in enumerate(targets):
        thread = threading.Thread(target=target, name=f"{name}-{index}", daemon=True)
        thread.start()
        started.append(thread)
    return started
