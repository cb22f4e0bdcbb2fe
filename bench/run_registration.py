"""Run registrations per second through nginx, with 64 concurrent clients, on PostgreSQL
and on SQLite, with p50/p99 latency.

Each database gets a fresh `tbhub serve` (nginx, control plane, supervisor) and a write
token; 64 asyncio clients each POST /api/v1/projects/bench/runs in a loop (distinct names,
as jobs do), for `--requests` registrations per round after a warm-up. The figure is the
median of `--rounds` rounds. Every registration creates its run directory and row, and
commits before its 201. The load generator runs on the same 2 cores as the server, so the
numbers are a floor, and noisy when other work shares the machine.

    python bench/run_registration.py [--rounds 5] [--requests 3000] [--clients 64]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time

import httpx

from _harness import (
    PROJECT,
    arguments,
    emit_json,
    hub_on_database,
    log,
    median,
    on_databases,
    percentile,
    temp_dir,
)


async def one_round(base_url: str, token: str, *, clients: int, requests: int, tag: str
                    ) -> tuple[float, list[float], int]:  # fmt: skip
    """(seconds, latencies in ms, errors) of `requests` registrations over `clients` clients."""
    latencies: list[float] = []
    errors = 0
    issued = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    headers = {"Authorization": f"Bearer {token}"}
    url = f"/api/v1/projects/{PROJECT}/runs"
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits,
                                 timeout=30.0) as http:  # fmt: skip

        async def worker(index: int) -> None:
            nonlocal errors, issued
            n = 0
            while issued < requests:
                issued += 1
                n += 1
                started = time.perf_counter()
                response = await http.post(url, json={"name": f"{tag}-c{index}-{n}"})
                latencies.append((time.perf_counter() - started) * 1000)
                if response.status_code != 201:
                    errors += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(clients)))
        return time.perf_counter() - started, latencies, errors


def measure(database: str, url: str, args: argparse.Namespace) -> dict[str, object]:
    log(f"{database}: {args.rounds} rounds of {args.requests} registrations, "
        f"{args.clients} clients")  # fmt: skip
    with temp_dir("tbhub-bench-runs-") as root:
        hub = hub_on_database(root, url)
        with hub.serving():
            token = hub.write_token()
            asyncio.run(one_round(hub.base_url, token, clients=args.clients,
                                  requests=args.warmup, tag="warm"))  # fmt: skip
            rounds: list[dict[str, float]] = []
            for r in range(args.rounds):
                seconds, latencies, errors = asyncio.run(one_round(
                    hub.base_url, token, clients=args.clients, requests=args.requests,
                    tag=f"r{r}"))  # fmt: skip
                rate = len(latencies) / seconds
                rounds.append({
                    "per_second": rate,
                    "p50_ms": percentile(latencies, 0.50),
                    "p99_ms": percentile(latencies, 0.99),
                    "errors": errors,
                })  # fmt: skip
                log(f"  {database} round {r + 1}: {rate:.0f}/s, p50 {rounds[-1]['p50_ms']:.1f} ms, "
                    f"p99 {rounds[-1]['p99_ms']:.1f} ms, {errors} errors")  # fmt: skip
            registered = len(list((root / "storage" / PROJECT).iterdir()))
    return {
        "database": database,
        "clients": args.clients,
        "requests_per_round": args.requests,
        "per_second_median": median([r["per_second"] for r in rounds]),
        "p50_ms_median": median([r["p50_ms"] for r in rounds]),
        "p99_ms_median": median([r["p99_ms"] for r in rounds]),
        "errors": sum(int(r["errors"]) for r in rounds),
        "run_directories": registered,
        "rounds": rounds,
    }


def main() -> None:
    parser = arguments(__doc__, warmup=500, json=False, databases="postgresql,sqlite")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=64)
    args = parser.parse_args()
    results = on_databases(args.databases, functools.partial(measure, args=args))
    emit_json({"benchmark": "run_registration", "results": results,
               "target": {"postgresql_per_second": 300, "p99_ms": 100}})  # fmt: skip


if __name__ == "__main__":
    main()
