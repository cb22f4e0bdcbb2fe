"""Cold start: tbhub versus a bare TensorBoard on the same logdir.

What it measures, per run:

- bare: the seconds from spawning
  `tensorboard --logdir <logdir> --load_fast=true --port <p> --host 127.0.0.1`
  to the first `GET /data/runs` that answers 200 listing all 20 runs;
- tbhub: with `tbhub serve` up (nginx answering /healthz) and no board running, the seconds
  from the first `GET /boards/bench/data/runs` through nginx (signed-in session cookie,
  `Accept: application/json`) to the first such request answering 200 listing all 20 runs.
  That covers nginx, the auth hook, the supervisor starting the board on demand, its
  readiness probe and TensorBoard's own start-up.

Both poll every 50 ms. Data: 20 runs x 5,000 steps x 5 scalar tags, written once with
tbhub.sample_logs (TensorBoard's event-file writer), cached under
$TMPDIR/tbhub-bench-cache/ and copied into a scratch storage root that both sides read.

Every tbhub run uses a new `tbhub serve` with a fresh data dir (database) over the same
storage root. Restarting `tbhub serve` on the same data dir is not enough for a cold board:
the board's desired state ("running") is kept in the database, so the supervisor starts the
board again as soon as serve comes up, before any request.

Runs alternate bare, tbhub, bare, ...; one unmeasured warm-up pair comes first. Reported:
every run, the medians and median(tbhub) / median(bare); the target is <= 1.3x.

Run it from the repository root (`make bench` runs it, then bench/warm_throughput.py):

    .venv/bin/python bench/cold_start.py [--runs 5] [--warmup 1] [--json]

Needs nginx on PATH (or in /usr/sbin). Uses ports 19000-19499 on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from _harness import (
    PROJECT,
    TBHUB_BIN,
    Tbhub,
    bare_tensorboard,
    cached_logdir,
    emit_json,
    free_port,
    log,
    median,
    runs_listed,
    temp_dir,
    wait_for,
)

RUNS, STEPS, TAGS = 20, 5000, 5
POLL_INTERVAL = 0.05
TIMEOUT = 180.0
TARGET_RATIO = 1.3


@dataclass
class Sample:
    kind: str  # "bare" or "tbhub"
    index: int  # 0 for the warm-up pair, then 1..n
    seconds: float


def measure_bare(logdir: Path, names: Sequence[str], work: Path, label: str) -> float:
    """Seconds from spawning TensorBoard to /data/runs listing every run."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/data/runs"
    started = time.monotonic()
    board = bare_tensorboard(logdir, port, work / f"bare-{label}.log")
    try:
        with httpx.Client(timeout=5.0) as client:
            wait_for(
                runs_listed(client, url, names),
                timeout=TIMEOUT,
                what=f"bare TensorBoard to list {len(names)} runs",
                interval=POLL_INTERVAL,
                alive=board.alive,
            )
        return time.monotonic() - started
    except RuntimeError as exc:
        raise RuntimeError(f"{exc}; its log ends:\n{board.log_tail()}") from None
    finally:
        board.stop()


def measure_tbhub(
    storage: Path, names: Sequence[str], work: Path, label: str, tbhub_bin: str
) -> float:
    """Seconds from the first board request through nginx to /data/runs listing every run."""
    hub = Tbhub(root=work / f"tbhub-{label}", storage_root=storage, tbhub_bin=tbhub_bin)
    hub.root.mkdir()
    try:
        hub.set_up()
        hub.start()
        cookie = hub.sign_in()
        running = list(hub.data_dir.glob("boards/*.json"))
        if running:
            raise RuntimeError(f"the board is not cold: state files {running} exist already")
        headers = {"Cookie": f"tbhub_session={cookie}", "Accept": "application/json"}
        with httpx.Client(timeout=5.0, headers=headers) as client:
            started = time.monotonic()
            wait_for(
                runs_listed(client, hub.board_url("data/runs"), names),
                timeout=TIMEOUT,
                what=f"tbhub to list {len(names)} runs",
                interval=POLL_INTERVAL,
                alive=lambda: hub.server is not None and hub.server.alive(),
            )
            return time.monotonic() - started
    except RuntimeError as exc:
        tail = hub.server.log_tail() if hub.server is not None else ""
        raise RuntimeError(f"{exc}; tbhub serve's log ends:\n{tail}") from None
    finally:
        hub.stop()


def run(repeats: int, warmup: int, tbhub_bin: str) -> list[Sample]:
    cached, names = cached_logdir(runs=RUNS, steps=STEPS, tags=TAGS)
    samples: list[Sample] = []
    with temp_dir("tbhub-bench-cold.") as work:
        storage = work / "storage"
        logdir = storage / PROJECT
        shutil.copytree(cached, logdir)
        for index in range(1 - warmup, repeats + 1):
            label = f"{index}" if index > 0 else f"warmup{-index}"
            tag = "warm-up" if index <= 0 else f"run {index}/{repeats}"
            bare = measure_bare(logdir, names, work, label)
            log(f"{tag}: bare  {bare:6.2f}s")
            hub = measure_tbhub(storage, names, work, label, tbhub_bin)
            log(f"{tag}: tbhub {hub:6.2f}s")
            if index > 0:
                samples += [Sample("bare", index, bare), Sample("tbhub", index, hub)]
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each (>= 1)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured pairs first")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--tbhub-bin", default=TBHUB_BIN, help="the tbhub executable to measure (A/B tests)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")

    samples = run(args.runs, args.warmup, args.tbhub_bin)
    bare = [s.seconds for s in samples if s.kind == "bare"]
    hub = [s.seconds for s in samples if s.kind == "tbhub"]
    bare_median, hub_median = median(bare), median(hub)
    ratio = hub_median / bare_median
    summary = (
        f"cold_start: bare median {bare_median:.2f}s, tbhub median {hub_median:.2f}s, "
        f"ratio {ratio:.2f}x (n={args.runs})"
    )
    if args.json:
        emit_json(
            {
                "benchmark": "cold_start",
                "data": {"runs": RUNS, "steps": STEPS, "tags": TAGS},
                "samples": [asdict(s) for s in samples],
                "bare_median_s": bare_median,
                "tbhub_median_s": hub_median,
                "ratio": ratio,
                "target_ratio_max": TARGET_RATIO,
                "target_met": ratio <= TARGET_RATIO,
                "n": args.runs,
                "summary": summary,
            }
        )
        return 0
    print(f"{'run':>4} {'bare s':>8} {'tbhub s':>8}")
    for index in range(1, args.runs + 1):
        print(f"{index:>4} {bare[index - 1]:8.2f} {hub[index - 1]:8.2f}")
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"target: ratio <= {TARGET_RATIO:.1f}x: {verdict}")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
