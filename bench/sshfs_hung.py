"""One project's mount hung: how fast the UI, the API and a board answer for another project.

`tbhub serve` on a local storage root with two projects: `bench` on the local disk and
`remote` on an sshfs mount at its directory (a private sshd on loopback,
tests/support/sshfs.py). Discovery first: runs written on the mount's server side (as
another machine would write them) until GET .../runs lists them, the watcher polling the
mount every --poll-interval seconds. Then the mount hangs (sshfs stopped), readers keep
asking for the hung project's run page in the background, and each round times
--requests requests of each kind for `bench`, through nginx: the project's page, the API's
run list and the board's run list (each through the auth hook). Reported: p50 and p99 per
kind, the median over the rounds; target p99 <= 500 ms.

    TBHUB_TEST_PORTS=19500-19999 .venv/bin/python bench/sshfs_hung.py [--runs 3] \
        [--requests 100] [--poll-interval 2] [--json]
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from _places import PROJECT, USER
from _processes import temp_dir, wait_for
from _reports import arguments, log, median, percentile, report
from _tbhub import Tbhub
from tbhub.storage.sample_logs import write_project, write_run

REMOTE = "remote"
KINDS = {
    "ui_page": f"/projects/{PROJECT}",
    "api_runs": f"/api/v1/projects/{PROJECT}/runs",
    "board_runs": f"/boards/{PROJECT}/data/runs",
}


def _listed(client: httpx.Client, project: str, path: str) -> bool:
    response = client.get(f"/api/v1/projects/{project}/runs")
    return response.status_code == 200 and any(r["path"] == path for r in response.json()["runs"])


def discovery(hub: Tbhub, client: httpx.Client, backing: Any, runs: int) -> list[float]:
    samples = []
    for index in range(runs):
        path = f"found/run-{index}"
        started = time.monotonic()
        write_run(backing / path, steps=3)
        wait_for(lambda path=path: _listed(client, REMOTE, path), timeout=60,
                 what=f"{path} on the mount in GET runs", interval=0.02)  # fmt: skip
        samples.append(time.monotonic() - started)
        log(f"discovery on sshfs: run {index + 1}/{runs} listed after {samples[-1]:.2f}s")
    return samples


def answers(client: httpx.Client, requests: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(requests):
        for kind, path in KINDS.items():
            started = time.monotonic()
            response = client.get(path)
            timings[kind].append(time.monotonic() - started)
            if response.status_code != 200:
                raise RuntimeError(f"{path} answered {response.status_code}: {response.text}")
    return timings


def main() -> None:
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--requests", type=int, default=100, help="requests of each kind a round")
    parser.add_argument("--poll-interval", type=float, default=2.0)
    args = parser.parse_args()
    # Importable once _places put the repository root on the path.
    from tests.support.sshfs import sshfs_available, sshfs_mount

    reason = sshfs_available()
    if reason:
        raise SystemExit(f"sshfs_hung: {reason}")
    with temp_dir("tbhub-bench-sshfs.") as work:
        storage = work / "storage"
        hub = Tbhub(root=work, storage_root=storage,
                    extra_env={"TBHUB_WATCH_POLL_INTERVAL": str(args.poll_interval)})  # fmt: skip
        with sshfs_mount(work / "nfs", at=storage / REMOTE) as mount:

            def prepare() -> None:
                hub.cli("admin", "project", "create", REMOTE, "--owner", USER)
                write_project(storage / PROJECT, runs=3, steps=50, tags=2)
                write_project(mount.backing, runs=3, steps=50, tags=2, prefix="far")

            with hub.serving(prepare):
                cookie = hub.sign_in()
                hub.wait_for_board(cookie, "data/runs")
                with hub.browser(cookie, timeout=30.0) as client:
                    client.base_url = httpx.URL(hub.base_url)
                    found = discovery(hub, client, mount.backing, args.runs)
                    far = next(r["id"] for r in client.get(
                        f"/api/v1/projects/{REMOTE}/runs").json()["runs"])  # fmt: skip
                    answers(client, 5)  # warm
                    rounds = []
                    stop = threading.Event()

                    def hung_reader() -> None:
                        with hub.browser(cookie, timeout=60.0) as reader:
                            while not stop.is_set():
                                reader.get(f"{hub.base_url}/projects/{REMOTE}/runs/{far}")

                    mount.hang()
                    readers = [threading.Thread(target=hung_reader) for _ in range(4)]
                    try:
                        for thread in readers:
                            thread.start()
                        for index in range(args.runs):
                            rounds.append(answers(client, args.requests))
                            log(f"round {index + 1}/{args.runs} with {REMOTE}'s mount hung")
                    finally:
                        stop.set()
                        mount.resume()
                        for thread in readers:
                            thread.join(timeout=60)
    result: dict[str, Any] = {
        "discovery_polling_sshfs": {"seconds": found, "median": median(found),
                                    "poll_interval": args.poll_interval},
        "requests_per_round": args.requests,
        "rounds": args.runs,
    }  # fmt: skip
    for kind in KINDS:
        p50 = [percentile(r[kind], 0.5) * 1000 for r in rounds]
        p99 = [percentile(r[kind], 0.99) * 1000 for r in rounds]
        result[kind] = {"p50_ms": median(p50), "p99_ms": median(p99), "rounds_p99_ms": p99}
    text = "; ".join(
        f"{kind} p50 {result[kind]['p50_ms']:.1f} ms, p99 {result[kind]['p99_ms']:.1f} ms"
        for kind in KINDS
    )
    report(result, as_json=args.json, to_log=True, text=(
        f"with one mount hung: {text} (target p99 <= 500 ms); discovery on sshfs polling "
        f"every {args.poll_interval}s: median {result['discovery_polling_sshfs']['median']:.2f}s"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
