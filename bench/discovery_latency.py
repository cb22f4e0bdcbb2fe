"""Discovery: seconds from a new run's first event file to the run in GET .../runs.

With `tbhub serve` running (watcher in inotify mode, then in polling mode with
TBHUB_WATCH_POLL_INTERVAL), each sample writes one event with TensorBoard's own writer into
a new directory of the bench project, straight on the storage as a job on shared storage
would, and polls `GET /api/v1/projects/bench/runs?status=discovered` every 20 ms until the
run is listed. Reported: every sample and the median per mode; the target is <= the poll
interval + 1 s.

    .venv/bin/python bench/discovery_latency.py [--runs 5] [--poll-interval 10] [--json]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from _ingest import serving
from _places import PROJECT
from _processes import wait_for
from _reports import arguments, log, median, report


def measure(mode: str, runs: int, poll_interval: float) -> list[float]:
    settings = {"watch_mode": mode, "watch_poll_interval": str(poll_interval)}
    samples = []
    with serving(f"tbhub-bench-discovery-{mode}.", **settings) as (hub, api):
        for index in range(runs):
            path = f"found/run-{index}"
            listed = _listed(api, path)
            started = time.monotonic()
            writer = EventFileWriter(str(hub.storage_root / PROJECT / path))
            writer.add_event(Event(wall_time=time.time(), step=0))
            writer.flush()
            wait_for(listed, timeout=poll_interval + 30, what=f"{path} in GET runs",
                     interval=0.02)  # fmt: skip
            samples.append(time.monotonic() - started)
            writer.close()
            log(f"{mode}: run {index + 1}/{runs} listed after {samples[-1]:.2f}s")
    return samples


def _listed(api: httpx.Client, path: str) -> Callable[[], bool]:
    def check() -> bool:
        response = api.get(f"/api/v1/projects/{PROJECT}/runs", params={"status": "discovered"})
        return response.status_code == 200 and any(
            run["path"] == path for run in response.json()["runs"]
        )

    return check


def main() -> None:
    parser = arguments(__doc__, runs=5)
    parser.add_argument("--poll-interval", type=float, default=10.0)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "poll_interval": args.poll_interval,
        "target_seconds": args.poll_interval + 1,
    }
    for mode in ("inotify", "polling"):
        samples = measure(mode, args.runs, args.poll_interval)
        result[mode] = {"seconds": samples, "median": median(samples)}
    report(result, as_json=args.json, to_log=True, text=(
        f"discovery: inotify {result['inotify']['median']:.2f}s, polling "
        f"{result['polling']['median']:.2f}s (poll interval {args.poll_interval}s; "
        f"target <= {args.poll_interval + 1}s)"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
