"""Cold start: tbhub (boards exec'd, and forked from the zygote) versus bare TensorBoard.

What it measures, per run:

- bare: the seconds from spawning
  `tensorboard --logdir <logdir> --load_fast=true --port <p> --host 127.0.0.1`
  to the first `GET /data/runs` that answers 200 listing all 20 runs;
- exec / zygote: `tbhub serve` with TBHUB_BOARD_LAUNCHER=exec or =zygote, up (nginx
  answering /healthz, and for zygote the board zygote listening) with no board running; the
  seconds from the first `GET /boards/bench/data/runs` through nginx (signed-in session
  cookie, `Accept: application/json`) to the first such request answering 200 listing all
  20 runs. That covers nginx, the auth hook, the supervisor starting the board on demand,
  its readiness probe and TensorBoard's own start-up (or, forked, what is left of it).

Both poll every 50 ms. Data: 20 runs x 5,000 steps x 5 scalar tags, written once with
tbhub.sample_logs (TensorBoard's event-file writer), cached under
$TMPDIR/tbhub-bench-cache/ and copied into a scratch storage root that both sides read.

Every tbhub run uses a new `tbhub serve` with a fresh data dir (database) over the same
storage root. Restarting `tbhub serve` on the same data dir is not enough for a cold board:
the board's desired state ("running") is kept in the database, so the supervisor starts the
board again as soon as serve comes up, before any request.

Runs cycle bare, exec, zygote, bare, ...; one unmeasured warm-up round comes first.
Reported: every run, the medians and median(launcher) / median(bare). Targets: exec <= 1.3x,
zygote <= 0.6x.

Run it from the repository root (`make bench` runs it, then bench/warm_throughput.py):

    .venv/bin/python bench/cold_start.py [--runs 5] [--warmup 1] [--launchers exec,zygote] [--json]

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
TARGET_RATIO = {"exec": 1.3, "zygote": 0.6}


@dataclass
class Sample:
    kind: str  # "bare", "exec" or "zygote"
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
    storage: Path, names: Sequence[str], work: Path, label: str, tbhub_bin: str, launcher: str,
    extra_env: dict[str, str] | None = None,
) -> float:  # fmt: skip
    """Seconds from the first board request through nginx to /data/runs listing every run.
    `extra_env`: more settings (bench/docker_cold_start.py puts boards in containers)."""
    hub = Tbhub(
        root=work / f"tbhub-{launcher}-{label}",
        storage_root=storage,
        tbhub_bin=tbhub_bin,
        extra_env={"TBHUB_BOARD_LAUNCHER": launcher, **(extra_env or {})},
    )
    hub.root.mkdir()
    try:
        hub.set_up()
        hub.start()
        if launcher == "zygote":
            hub.wait_for_zygote()
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


def run(repeats: int, warmup: int, tbhub_bin: str, launchers: Sequence[str]) -> list[Sample]:
    cached, names = cached_logdir(runs=RUNS, steps=STEPS, tags=TAGS)
    samples: list[Sample] = []
    with temp_dir("tbhub-bench-cold.") as work:
        storage = work / "storage"
        logdir = storage / PROJECT
        shutil.copytree(cached, logdir)
        for index in range(1 - warmup, repeats + 1):
            label = f"{index}" if index > 0 else f"warmup{-index}"
            tag = "warm-up" if index <= 0 else f"run {index}/{repeats}"
            measured = [Sample("bare", index, measure_bare(logdir, names, work, label))]
            for launcher in launchers:
                seconds = measure_tbhub(storage, names, work, label, tbhub_bin, launcher)
                measured.append(Sample(launcher, index, seconds))
            log(f"{tag}: " + ", ".join(f"{s.kind} {s.seconds:.2f}s" for s in measured))
            if index > 0:
                samples += measured
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each (>= 1)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    parser.add_argument(
        "--launchers",
        default="exec,zygote",
        help="tbhub board launchers to measure, comma-separated",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--tbhub-bin", default=TBHUB_BIN, help="the tbhub executable to measure (A/B tests)"
    )
    args = parser.parse_args(argv)
    launchers = [name for name in args.launchers.split(",") if name]
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")
    if not launchers or set(launchers) - set(TARGET_RATIO):
        parser.error(f"--launchers takes a comma-separated subset of {sorted(TARGET_RATIO)}")

    samples = run(args.runs, args.warmup, args.tbhub_bin, launchers)
    medians = {
        kind: median([s.seconds for s in samples if s.kind == kind])
        for kind in ["bare", *launchers]
    }
    ratios = {launcher: medians[launcher] / medians["bare"] for launcher in launchers}
    summary = (
        f"cold_start: bare median {medians['bare']:.2f}s; "
        + "; ".join(
            f"{launcher} median {medians[launcher]:.2f}s, ratio {ratios[launcher]:.2f}x "
            f"(target <= {TARGET_RATIO[launcher]}x)"
            for launcher in launchers
        )
        + f" (n={args.runs})"
    )
    if args.json:
        emit_json(
            {
                "benchmark": "cold_start",
                "data": {"runs": RUNS, "steps": STEPS, "tags": TAGS},
                "samples": [asdict(s) for s in samples],
                "median_s": medians,
                "ratio": ratios,
                "target_ratio_max": {launcher: TARGET_RATIO[launcher] for launcher in launchers},
                "target_met": {
                    launcher: ratios[launcher] <= TARGET_RATIO[launcher] for launcher in launchers
                },
                "n": args.runs,
                "summary": summary,
            }
        )
        return 0
    kinds = ["bare", *launchers]
    print(f"{'run':>4} " + " ".join(f"{kind + ' s':>9}" for kind in kinds))
    for index in range(1, args.runs + 1):
        row = {s.kind: s.seconds for s in samples if s.index == index}
        print(f"{index:>4} " + " ".join(f"{row[kind]:9.2f}" for kind in kinds))
    for launcher in launchers:
        verdict = "met" if ratios[launcher] <= TARGET_RATIO[launcher] else "MISSED"
        print(f"target: {launcher} ratio <= {TARGET_RATIO[launcher]:.1f}x: {verdict}")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
