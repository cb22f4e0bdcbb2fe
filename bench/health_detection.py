"""Detection latency: from a NaN's record being written to the webhook receiving the incident.

A real `tbhub serve` (SQLite, its own nginx, ports in TBHUB_BENCH_PORTS, default 19000-19499)
watches the storage with inotify, then (a second server) by polling. Each round has a project
of its own with a signed webhook channel pointing at a receiver on loopback (allowed by
TBHUB_NOTIFY_ALLOW_NETWORKS, as an admin would allow an internal range). A training-like
writer (torch's SummaryWriter, in its own process, 20 steps a second, flushing each step)
starts a new run there; its loss turns NaN at step 60. The latency is the receiver's clock
when the webhook arrives minus the writer's when the NaN record was flushed (one machine,
one clock). One warm-up round, then the median of `--runs`.
Targets: <= 2 s with inotify; <= the poll interval + 2 s with polling.

    .venv/bin/python bench/health_detection.py [--runs 5] [--poll-interval 2]
        [--modes inotify,polling] [--json]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from _places import free_port  # first of the harness: it puts the repository root on sys.path
from _processes import temp_dir
from _reports import arguments, emit_report, median
from tbhub.core.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.core.processes import ProcessRef, stop_group
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.domain.projects import create_project
from tbhub.health.notify.channels import ChannelInput, create_channel

from tests.health.writers import LiveRun, RunSpec  # isort: skip (needs _places first)

HOST = "127.0.0.1"
TBHUB = str(Path(sys.executable).parent / "tbhub")
NAN_STEP = 60
RATE = 20.0  # steps a second
TARGET_INOTIFY = 2.0


@dataclass
class Sample:
    mode: str
    round: int
    seconds: float  # NaN flushed -> webhook received


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Receiver:
    """A webhook receiver on loopback: when each project's first message arrived."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.event = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                at = time.time()
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                project = json.loads(body).get("project")
                with receiver.event:
                    receiver.arrived.setdefault(str(project), at)
                    receiver.event.notify_all()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((HOST, free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{HOST}:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, project: str, timeout: float) -> float:
        with self.event:
            if not self.event.wait_for(lambda: project in self.arrived, timeout):
                raise TimeoutError(f"no webhook for {project} within {timeout:.0f}s")
            return self.arrived[project]


@contextmanager
def serving(work: Path, mode: str, poll_interval: float, projects: list[str],
            hook: str) -> Iterator[Path]:  # fmt: skip
    """`tbhub serve` on a fresh installation whose projects each send to `hook`; yields
    the storage root."""
    http_port, api_port = free_port(), free_port()
    env = {
        **os.environ,
        "TBHUB_DATA_DIR": str(work / "data"),
        "TBHUB_STORAGE_ROOT": str(work / "storage"),
        "TBHUB_DATABASE_URL": f"sqlite:///{work / 'tbhub.sqlite3'}",
        "TBHUB_HTTP_PORT": str(http_port),
        "TBHUB_API_PORT": str(api_port),
        "TBHUB_PUBLIC_URL": f"http://{HOST}:{http_port}",
        "TBHUB_CONFIG": str(work / "absent.toml"),
        "TBHUB_WATCH_MODE": mode,
        "TBHUB_WATCH_POLL_INTERVAL": str(poll_interval),
        "TBHUB_NOTIFY_ALLOW_NETWORKS": '["127.0.0.0/8"]',
    }
    settings = prepare_runtime(Settings(
        data_dir=work / "data", storage_root=work / "storage",
        database_url=env["TBHUB_DATABASE_URL"], notify_allow_networks=["127.0.0.0/8"],
    ))  # fmt: skip
    upgrade(settings.db_url)
    engine = make_engine(settings.db_url)
    with transaction(make_session_factory(engine)) as session:
        for name in projects:
            create_project(session, name=name, storage_root=settings.storage, owner=None,
                           actor="bench")  # fmt: skip
            create_channel(session, settings, project=name, actor="bench",
                           given=ChannelInput(name="hook", kind="webhook", url=hook))  # fmt: skip
    engine.dispose()
    with open(work / "serve.log", "ab") as out:
        process = subprocess.Popen([TBHUB, "serve"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError((work / "serve.log").read_text()[-3000:])
            try:
                if httpx.get(f"http://{HOST}:{http_port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("tbhub serve did not answer /healthz")
            time.sleep(0.1)
        time.sleep(2.0)  # the leader's duties (watcher, monitor, delivery) start after it
        yield settings.storage
    finally:
        stop_group(ProcessRef.of(process.pid), grace=20, signals=(signal.SIGTERM, signal.SIGKILL))
        process.wait(10)


def measure(mode: str, rounds: int, poll_interval: float, receiver: Receiver) -> list[Sample]:
    projects = [f"{mode}-{index}" for index in range(rounds + 1)]  # round 0: the warm-up
    samples = []
    with (
        temp_dir(f"tbhub-bench-detect-{mode}.") as work,
        serving(work, mode, poll_interval, projects, receiver.url) as storage,
    ):
        for index, project in enumerate(projects):
            spec = RunSpec(f"live-{index}", "torch", "nan", steps=100_000, bad_step=NAN_STEP,
                           seed=index)  # fmt: skip
            with LiveRun(storage / project / f"live-{index}", spec, rate=RATE) as run:
                flushed = run.wait_bad(timeout=120)
                arrived = receiver.wait(project, timeout=60 + poll_interval)
            seconds = arrived - flushed
            label = "warm-up" if index == 0 else f"round {index}/{rounds}"
            log(f"{mode} {label}: {seconds:.2f}s from the NaN on disk to the webhook")
            if index > 0:
                samples.append(Sample(mode, index, seconds))
    return samples


def main() -> None:
    parser = arguments(__doc__, runs=5)
    parser.add_argument("--poll-interval", type=float, default=2.0, help="polling mode's walk")
    parser.add_argument("--modes", default="inotify,polling")
    args = parser.parse_args()
    modes = args.modes.split(",")
    receiver = Receiver()
    samples: list[Sample] = []
    for mode in modes:
        samples += measure(mode, args.runs, args.poll_interval, receiver)
    medians = {m: median([s.seconds for s in samples if s.mode == m]) for m in modes}
    targets = {"inotify": TARGET_INOTIFY, "polling": args.poll_interval + 2.0}
    worst = {m: max(s.seconds for s in samples if s.mode == m) for m in modes}
    summary = "; ".join(
        f"{m}: {medians[m]:.2f}s median (max {worst[m]:.2f}s, target <= {targets[m]:g}s)"
        for m in modes
    )
    summary += f" from a NaN written to the webhook received, {args.runs} rounds each"
    if args.json:
        emit_report("health_detection", data={"rate": RATE, "nan_step": NAN_STEP,
                                              "poll_interval": args.poll_interval},
                    samples=samples, n=args.runs, summary=summary, median_seconds=medians,
                    target_seconds={m: targets[m] for m in modes})  # fmt: skip
    else:
        print(summary)


if __name__ == "__main__":
    main()
