"""Warm throughput: a ready board through tbhub's nginx gate versus the board directly.

What it measures: with the board of project `bench` running and ready,
`wrk -t2 -c64 -d10s -H 'Cookie: tbhub_session=<signed-in session>'` against

- direct: the board's own address, `http://<upstream>/boards/bench/data/environment`, where
  <upstream> comes from the board state file `<data_dir>/boards/*.json`;
- nginx: `http://127.0.0.1:<nginx port>/boards/bench/data/environment`, i.e. nginx, its
  auth_request hook (answers cached by nginx for a few seconds) and the proxy to the board.

Runs alternate direct, nginx, direct, ... (5 of each by default) after one short unmeasured
warm-up of each. Reported: requests/s of every run, the medians and
median(nginx) / median(direct); the target is >= 0.97x. Any non-2xx/3xx answer or socket error
that wrk reports is shown, and a run with non-2xx answers through nginx fails the check;
before measuring, the script checks that nginx answers 200 with the same JSON as the board.
Where a request's CPU goes: during every run it also reads the CPU time (user + system) of
each party, the board (its processes, or its container's), nginx (master and worker),
`tbhub serve` (which answers the auth hook: close to nothing when nginx's cache of its
answers hits), docker's port proxy for a container board, and wrk itself, and reports the
medians per mode in microseconds of CPU per request. On a host of few cores, every
microsecond nginx spends is one the board cannot.

With `--backend docker` the board is a container (TBHUB_BOARD_BACKEND=docker, the board
image built first, an installation id of the run whose containers and network are removed
afterwards): direct is then the address nginx proxies to, by default the port the
container publishes on 127.0.0.1 (through docker's port proxy), with `--docker-upstream
bridge` the container's own address on its bridge network (no port proxy on either path);
the target is >= 0.97x as well.

Data: 3 runs x 100 steps x 5 tags (tbhub.storage.sample_logs), cached under
$TMPDIR/tbhub-bench-cache/.

Run it from the repository root (`make bench` runs bench/cold_start.py, then this):

    .venv/bin/python bench/warm_throughput.py [--runs 5] [--duration 10] [--backend docker]
        [--docker-upstream published|bridge] [--json]

Needs nginx and wrk on PATH. Uses ports 19000-19499 on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from _cpu import Parties, listening_proxies, state_file_pids
from _processes import temp_dir
from _reports import arguments, at_least, emit_json, log, median
from _sample_data import copied_logdir
from _tbhub import Tbhub, docker_boards
from _wrk import WrkReport, run_wrk

RUNS, STEPS, TAGS = 3, 100, 5
THREADS, CONNECTIONS = 2, 64
PATH = "data/environment"
TARGET_RATIO = {"subprocess": 0.97, "docker": 0.97}  # issue 19: the proxy costs nothing


@dataclass
class WrkResult:
    kind: str  # "direct" or "nginx"
    index: int
    requests_per_s: float
    requests: int
    non_2xx_3xx: int
    socket_errors: str | None
    cpu_s: dict[str, float] | None = None  # CPU seconds of each party during the run

    def cpu_us_per_request(self) -> dict[str, float]:
        return {name: round(seconds / self.requests * 1e6, 1)
                for name, seconds in (self.cpu_s or {}).items()}  # fmt: skip


DISTINCT_URLS = Path(__file__).with_name("distinct_urls.lua")


def wrk(url: str, cookie: str, duration: int, work: Path, label: str, distinct: bool) -> WrkReport:
    options = ["-s", str(DISTINCT_URLS)] if distinct else []
    return run_wrk(url, threads=THREADS, connections=CONNECTIONS, duration=duration,
                   log_path=work / f"wrk-{label}.log", options=options,
                   headers={"Cookie": f"tbhub_session={cookie}"})  # fmt: skip


def board_pids(hub: Tbhub, env: dict[str, str]) -> list[int]:
    """The bench board's processes: its container's init (docker), else the PID its state
    file records."""
    installation = env.get("TBHUB_INSTALLATION_ID")
    if installation is None:
        return state_file_pids(hub.data_dir.glob("boards/*.json"))
    import docker

    from tbhub.supervisor.backends.containers import INSTALLATION

    client = docker.from_env()
    try:
        found = client.containers.list(filters={"label": f"{INSTALLATION}={installation}"})
        return [int(c.attrs["State"]["Pid"]) for c in found]
    finally:
        client.close()


def parties(hub: Tbhub, env: dict[str, str]) -> Parties:
    """The processes a request through nginx, or directly to the board, may use CPU in."""
    assert hub.server is not None
    port = int(hub.board_upstream().rsplit(":", 1)[1])
    return Parties(
        trees={
            "board": board_pids(hub, env),
            "nginx": state_file_pids([hub.data_dir / "nginx" / "master.json"]),
            "docker-proxy": listening_proxies(port),
        },
        alone={"serve": [hub.server.pid]},
    )


def check_same_answer(direct_url: str, nginx_url: str, cookie: str) -> None:
    """nginx must answer 200 with the board's own JSON, not the control plane's fallback."""
    headers = {"Cookie": f"tbhub_session={cookie}"}
    direct = httpx.get(direct_url, headers=headers, timeout=10.0)
    proxied = httpx.get(nginx_url, headers=headers, timeout=10.0)
    if direct.status_code != 200 or proxied.status_code != 200:
        raise RuntimeError(f"direct {direct.status_code}, nginx {proxied.status_code}")
    if direct.json() != proxied.json():
        raise RuntimeError(f"nginx answered {proxied.text!r}, the board {direct.text!r}")


def measure(
    repeats: int, duration: int, warmup: int, tbhub_bin: str, backend: str, upstream: str,
    distinct: bool,
) -> tuple[list[WrkResult], dict[str, str]]:  # fmt: skip
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(docker_boards(upstream)) if backend == "docker" else {}
        return measure_with(repeats, duration, warmup, tbhub_bin, env, distinct)


def measure_with(
    repeats: int, duration: int, warmup: int, tbhub_bin: str, env: dict[str, str],
    distinct: bool,
) -> tuple[list[WrkResult], dict[str, str]]:  # fmt: skip
    results: list[WrkResult] = []
    with temp_dir("tbhub-bench-warm.") as work:
        storage, _names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
        hub = Tbhub(root=work / "tbhub", storage_root=storage, tbhub_bin=tbhub_bin, extra_env=env)
        with hub.serving():
            cookie = hub.sign_in()
            nginx_url = hub.board_url(PATH)
            hub.wait_for_board(cookie, PATH)
            direct_url = hub.direct_url(PATH)
            check_same_answer(direct_url, nginx_url, cookie)
            who = parties(hub, env)
            urls = {"direct": direct_url, "nginx": nginx_url}
            log(f"direct: {direct_url}\nnginx:  {nginx_url}")
            for kind, url in urls.items():
                for i in range(warmup):
                    wrk(url, cookie, min(duration, 3), work, f"{kind}-warmup{i}", distinct)
            for index in range(1, repeats + 1):
                for kind, url in urls.items():
                    cpu: dict[str, float] = {}
                    with who.measured(cpu):
                        report = wrk(url, cookie, duration, work, f"{kind}-{index}", distinct)
                    rate, total = report.requests_per_s, report.requests
                    non_2xx, errors = report.non_2xx_3xx, report.socket_errors
                    assert rate is not None and total is not None
                    result = WrkResult(kind, index, rate, total, non_2xx, errors, cpu_s=cpu)
                    results.append(result)
                    per_request = ", ".join(
                        f"{name} {us:.0f}" for name, us in result.cpu_us_per_request().items()
                    )
                    log(
                        f"run {index}/{repeats}: {kind:6} {rate:8.1f} req/s"
                        f" ({total} requests, non-2xx/3xx {non_2xx}, socket errors {errors});"
                        f" CPU us/request: {per_request}"
                    )
    return results, urls


def cpu_medians(results: Sequence[WrkResult]) -> dict[str, dict[str, float]]:
    """Per mode, each party's median CPU microseconds per request."""
    medians: dict[str, dict[str, float]] = {}
    for kind in ("direct", "nginx"):
        shares = [r.cpu_us_per_request() for r in results if r.kind == kind]
        names = sorted({name for share in shares for name in share})
        medians[kind] = {name: median([s.get(name, 0.0) for s in shares]) for name in names}
    return medians


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5, warmup=1, tbhub_bin=True)
    parser.add_argument("--duration", type=at_least(1), default=10, help="seconds per wrk run")
    parser.add_argument(
        "--backend", choices=sorted(TARGET_RATIO), default="subprocess",
        help="where the board runs: a subprocess, or a container on the local dockerd",
    )  # fmt: skip
    parser.add_argument(
        "--docker-upstream", choices=("published", "bridge"), default="published",
        help="how nginx (and direct) reach a container board (TBHUB_DOCKER_UPSTREAM)",
    )  # fmt: skip
    parser.add_argument(
        "--distinct-urls", action="store_true",
        help="give every request a query string of its own (bench/distinct_urls.lua), so that "
        "nginx's cache of board answers serves none: the proxy's own cost",
    )  # fmt: skip
    args = parser.parse_args(argv)

    target = TARGET_RATIO[args.backend]
    results, urls = measure(args.runs, args.duration, args.warmup, args.tbhub_bin, args.backend,
                            args.docker_upstream, args.distinct_urls)  # fmt: skip
    direct = [r for r in results if r.kind == "direct"]
    nginx = [r for r in results if r.kind == "nginx"]
    direct_median = median([r.requests_per_s for r in direct])
    nginx_median = median([r.requests_per_s for r in nginx])
    ratio = nginx_median / direct_median
    # No failure of any kind through nginx: no non-2xx answer, no reset or timeout.
    all_ok = all(r.non_2xx_3xx == 0 and r.socket_errors is None for r in nginx)
    cpu = cpu_medians(results)
    board = args.backend + (f", {args.docker_upstream}" if args.backend == "docker" else "")
    board += ", distinct URLs" if args.distinct_urls else ""
    summary = (
        f"warm_throughput ({board} board): direct median {direct_median:.1f} req/s, "
        f"nginx median {nginx_median:.1f} req/s, ratio {ratio:.2f}x (n={args.runs})"
    )
    if args.json:
        emit_json(
            {
                "benchmark": "warm_throughput",
                "wrk": f"-t{THREADS} -c{CONNECTIONS} -d{args.duration}s",
                "urls": urls,
                "data": {"runs": RUNS, "steps": STEPS, "tags": TAGS},
                "samples": [asdict(r) for r in results],
                "direct_median_rps": direct_median,
                "nginx_median_rps": nginx_median,
                "ratio": ratio,
                "nginx_all_2xx": all_ok,
                "cpu_us_per_request": cpu,
                "backend": args.backend,
                "docker_upstream": args.docker_upstream if args.backend == "docker" else None,
                "distinct_urls": args.distinct_urls,
                "target_ratio_min": target,
                "target_met": ratio >= target,
                "n": args.runs,
                "summary": summary,
            }
        )
        return 0 if all_ok else 1
    print(f"{'run':>4} {'direct req/s':>13} {'nginx req/s':>12}")
    for d, n in zip(direct, nginx, strict=True):
        print(f"{d.index:>4} {d.requests_per_s:13.1f} {n.requests_per_s:12.1f}")
    print("CPU microseconds per request (medians):")
    for kind, shares in cpu.items():
        print(f"  {kind:6} " + ", ".join(f"{name} {us:.0f}" for name, us in shares.items()))
    failures = [f"{r.non_2xx_3xx} non-2xx/3xx, socket errors {r.socket_errors}"
                for r in nginx if r.non_2xx_3xx or r.socket_errors]  # fmt: skip
    print("nginx answers: " + ("all 2xx/3xx, no socket errors" if all_ok else "; ".join(failures)))
    verdict = "met" if ratio >= target else "MISSED"
    print(f"target: ratio >= {target:.2f}x: {verdict}")
    print(summary)
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
