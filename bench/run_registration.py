"""Run registrations per second through nginx, with 64 concurrent clients, on PostgreSQL
and on SQLite, with p50/p99 latency.

Each round gets a fresh `tbhub serve` (nginx, control plane, supervisor) and a write
token. `wrk --latency` with 64 connections POSTs /api/v1/projects/bench/runs
(bench/register_runs.lua gives every request a distinct run name, as jobs do); anything but a
201 counts as an error. Every registration creates its run directory and row, and commits
before its 201. Each round, after a warm-up, has two parts of `--duration` seconds:

- peak: every client sends its next registration as soon as the last one is answered; the
  figure is the rate. With 64 clients always waiting, latency here is just 64 / rate.
- paced: an open-loop schedule of `--rate` registrations a second (the target, 300) over the
  64 connections, wrk2's way (bench/_paced.py): each request's latency counts from the time
  the schedule meant to send it, so a server that falls behind shows it in p99 instead of
  quietly being sent less (no coordinated omission). The figures are the rate served and
  the p50/p99 latency at that load.

The figures are medians over `--rounds` rounds. The peak load is wrk (C); the paced one is
asyncio on raw sockets, a few percent of a core at 300/s. The host's load average is
printed with each round: other work on the machine makes the figures noisy. At peak, the
CPU each party spends per registration (ms) says what limits the rate: the first `tbhub
serve` process, its API workers, nginx, PostgreSQL's backends on the bench's database, wrk.

With `--workers 1,2` each round has a fresh server per count (TBHUB_API_WORKERS), each on
a new database, one after the other in an order that alternates from round to round.

    python bench/run_registration.py [--rounds 5] [--duration 10] [--clients 64] [--rate 300]
                                     [--workers 1,2]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from _cpu import Parties, state_file_pids
from _paced import PacedReport, paced_posts
from _places import PROJECT, free_port
from _processes import temp_dir
from _reports import arguments, emit_json, log, median
from _tbhub import Tbhub, database_url, hub_on_database
from _wrk import WrkReport, run_wrk
from tbhub.core.leader_lock import libpq_url

SCRIPT = Path(__file__).with_name("register_runs.lua")


def registrations(base_url: str, token: str, *, clients: int, duration: int, tag: str,
                  pause_ms: int, log_path: Path) -> WrkReport:  # fmt: skip
    """`duration` seconds of registrations over `clients` connections, each pausing
    `pause_ms` before each request."""
    return run_wrk(
        f"{base_url}/api/v1/projects/{PROJECT}/runs",
        threads=2, connections=clients, duration=duration, log_path=log_path,
        headers={"Authorization": f"Bearer {token}"},
        options=["--latency", "--timeout", "30s", "-s", str(SCRIPT)],
        script_args=[tag, str(pause_ms)],
    )  # fmt: skip


def paced_registrations(base_url: str, token: str, *, clients: int, duration: int, tag: str,
                        rate: int) -> PacedReport:  # fmt: skip
    """`duration` seconds of registrations on an open-loop schedule of `rate` a second."""

    def body(connection: int, k: int) -> bytes:
        return json.dumps({"name": f"{tag}-c{connection}-{k}"}).encode()

    return paced_posts(
        f"{base_url}/api/v1/projects/{PROJECT}/runs", rate=rate, connections=clients,
        duration=duration, body=body,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )  # fmt: skip


def parties(hub: Tbhub, url: str) -> Parties:
    """Who spends the CPU of a registration: the first serve process alone (its zygote and
    boards are not in this path), its API workers, nginx, PostgreSQL's backends on this
    database, and wrk (the peak load's generator)."""
    record = hub.data_dir / "api-workers.json"  # none with one process
    workers = [int(w["pid"]) for w in json.loads(record.read_text())] if record.exists() else []
    alone = {"serve": [int((hub.data_dir / "serve.lock").read_text())], "api_workers": workers}
    if make_url(url).get_backend_name() == "postgresql":
        with psycopg.connect(libpq_url(url), autocommit=True) as connection:
            rows = connection.execute("SELECT pid FROM pg_stat_activity WHERE datname = "
                                      "current_database() AND pid <> pg_backend_pid()")  # fmt: skip
            alone["postgresql"] = [int(row[0]) for row in rows]
    nginx = state_file_pids([hub.data_dir / "nginx" / "master.json"])
    return Parties(trees={"nginx": nginx}, alone=alone)


def figures(report: WrkReport | PacedReport) -> dict[str, float]:
    load = os.getloadavg()[0]
    if isinstance(report, PacedReport):
        return {"per_second": report.per_second, "p50_ms": report.percentile_ms(50),
                "p99_ms": report.percentile_ms(99), "errors": report.failed + report.unsent,
                "load": load}  # fmt: skip
    assert report.requests_per_s is not None
    return {
        "per_second": report.requests_per_s,
        "p50_ms": report.latency_ms("50"),
        "p99_ms": report.latency_ms("99"),
        "errors": report.failed,
        "load": load,
    }


def summary(database: str, workers: int, args: argparse.Namespace, peaks: list[dict[str, float]],
            paced: list[dict[str, float]], registered: int) -> dict[str, object]:  # fmt: skip
    return {
        "database": database,
        "api_workers": workers,
        "clients": args.clients,
        "seconds_per_part": args.duration,
        "peak_per_second_median": median([r["per_second"] for r in peaks]),
        "peak_cpu_ms_per_registration_median": {
            key.removeprefix("cpu_ms_"): median([r[key] for r in peaks])
            for key in peaks[0]
            if key.startswith("cpu_ms_")
        },
        "paced_offered_per_second": args.rate,
        "paced_per_second_median": median([r["per_second"] for r in paced]),
        "paced_p50_ms_median": median([r["p50_ms"] for r in paced]),
        "paced_p99_ms_median": median([r["p99_ms"] for r in paced]),
        "errors": sum(int(r["errors"]) for r in peaks + paced),
        "run_directories": registered,
        "peak_rounds": peaks,
        "paced_rounds": paced,
    }


def serving(stack: contextlib.ExitStack, root: Path, url: str, workers: int) -> Tbhub:
    """A server with `workers` API workers, stopped when `stack` closes. A port picked free
    can be taken before the server binds it (the kernel hands out the bench's range to
    outgoing connections too): then it starts again on other ports, up to three times."""
    hub = hub_on_database(root, url)
    hub.extra_env["TBHUB_API_WORKERS"] = str(workers)
    hub.set_up()
    stack.callback(hub.stop)
    for attempt in range(3):
        try:
            hub.start()
            return hub
        except RuntimeError as exc:
            if attempt == 2:
                raise
            log(f"  tbhub serve did not start; again on other ports ({str(exc)[-200:]})")
            hub.stop()
            hub.http_port, hub.api_port = free_port(), free_port()
    raise AssertionError("unreachable")


def measure(database: str, args: argparse.Namespace) -> list[dict[str, object]]:
    """Each round, a fresh server per worker count, on a database of its own, in turn (the
    order alternates): A/B in one run, the host's other load hitting each alike. One at a
    time: idle servers keep their pools' PostgreSQL connections open (100 at most)."""
    counts = [int(n) for n in args.workers.split(",")]
    log(f"{database}: {args.rounds} rounds of {args.duration} s at peak and {args.duration} s "
        f"paced ({args.clients} connections, {args.rate} a second offered), API workers "
        f"{counts}")  # fmt: skip
    peaks: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    paced: dict[int, list[dict[str, float]]] = {n: [] for n in counts}
    registered = dict.fromkeys(counts, 0)
    for r in range(args.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            with (
                temp_dir(f"tbhub-bench-runs-{n}-") as root,
                database_url(database) as url,
                contextlib.ExitStack() as stack,
            ):
                hub = serving(stack, root, url, n)
                token = hub.write_token()
                load = functools.partial(registrations, hub.base_url, token,
                                         clients=args.clients, pause_ms=0)  # fmt: skip
                if args.warmup:
                    load(duration=args.warmup, tag="warm", log_path=root / "warm.log")
                cpu: dict[str, float] = {}
                with parties(hub, url).measured(cpu):
                    peak = load(duration=args.duration, tag=f"peak{r}",
                                log_path=root / f"peak-{r}.log")  # fmt: skip
                at_rate = paced_registrations(hub.base_url, token, clients=args.clients,
                                              duration=args.duration, tag=f"paced{r}",
                                              rate=args.rate)  # fmt: skip
                registered[n] += len(list((root / "storage" / PROJECT).iterdir()))
            for kind, report, into in (("peak", peak, peaks[n]), ("paced", at_rate, paced[n])):
                into.append(figures(report))
                if kind == "peak":  # CPU ms per registration, by party
                    done = max(1.0, into[-1]["per_second"] * args.duration)
                    into[-1].update({f"cpu_ms_{name}": round(1000 * sec / done, 2)
                                     for name, sec in cpu.items()})  # fmt: skip
                    log("    CPU ms per registration: " + ", ".join(
                        f"{k.removeprefix('cpu_ms_')} {v}" for k, v in into[-1].items()
                        if k.startswith("cpu_ms_")))  # fmt: skip
                log(f"  {database} workers {n} round {r + 1} {kind}: "
                    f"{into[-1]['per_second']:.0f}/s, p50 {into[-1]['p50_ms']:.1f} ms, "
                    f"p99 {into[-1]['p99_ms']:.1f} ms, {report.failures}, "
                    f"load {into[-1]['load']:.2f}")  # fmt: skip
    return [summary(database, n, args, peaks[n], paced[n], registered[n]) for n in counts]


def main() -> None:
    parser = arguments(__doc__, warmup=3, json=False, databases="postgresql,sqlite")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=int, default=10, help="seconds per part")
    parser.add_argument("--rate", type=int, default=300, help="the paced load's offered rate")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--workers", default="1", help="API worker counts to compare, e.g. 1,2")
    args = parser.parse_args()
    results = [row for kind in args.databases.split(",") for row in measure(kind, args)]
    emit_json({"benchmark": "run_registration", "results": results,
               "target": {"postgresql_per_second": 300, "p99_ms": 100}})  # fmt: skip


if __name__ == "__main__":
    main()
