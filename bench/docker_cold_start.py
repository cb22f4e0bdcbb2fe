"""Cold start of a board in a container (TBHUB_BOARD_BACKEND=docker) against subprocess boards.

What it measures, per run, each on a new `tbhub serve` with a fresh data dir over the same
storage root (the same logdir):

- exec / zygote: a subprocess board, exec'd or forked from the zygote (as bench/cold_start.py);
- docker: the board as a container of tbhub's board image on the local dockerd (the image
  built beforehand, as `make test` and `make bench` do), under an installation id of the run;

each the seconds from the first `GET /boards/bench/data/runs` through nginx (signed-in
session cookie) to the first such request answering 200 listing all 20 runs: nginx, the
auth hook, the supervisor starting the board on demand, its readiness probe and
TensorBoard's own start-up (in the container: create, start, publish the port, then the
same launcher). Polls every 50 ms. Data: 20 runs x 5,000 steps x 5 scalar tags, as
bench/cold_start.py.

Runs cycle exec, zygote, docker; one unmeasured warm-up round comes first. Reported: every
run, the medians and median(docker) / median(exec) (target <= 1.5x: the container against
a subprocess board that starts the same way, a new interpreter importing TensorBoard) and
median(docker) / median(zygote) (the default launcher, which forks a pre-imported
TensorBoard; for information).

Run it from the repository root:

    .venv/bin/python bench/docker_cold_start.py [--runs 5] [--warmup 1] [--json]

Needs nginx, a running dockerd (deploy/start-dockerd.sh) and ports 19000-19499 on 127.0.0.1.
Every container and network it makes carries its own installation label and is removed.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Sequence
from dataclasses import asdict

from _harness import (
    PROJECT,
    TBHUB_BIN,
    cached_logdir,
    docker_boards,
    emit_json,
    log,
    median,
    temp_dir,
)
from cold_start import RUNS, STEPS, TAGS, Sample, measure_tbhub

TARGET_RATIO = 1.5  # docker / exec
KINDS = ("exec", "zygote", "docker")


def run(repeats: int, warmup: int, tbhub_bin: str) -> list[Sample]:
    cached, names = cached_logdir(runs=RUNS, steps=STEPS, tags=TAGS)
    samples: list[Sample] = []
    with temp_dir("tbhub-bench-docker-cold.") as work:
        storage = work / "storage"
        shutil.copytree(cached, storage / PROJECT)
        for index in range(1 - warmup, repeats + 1):
            label = f"{index}" if index > 0 else f"warmup{-index}"
            measured = []
            for kind in KINDS:
                if kind == "docker":
                    with docker_boards() as env:
                        seconds = measure_tbhub(storage, names, work, f"docker-{label}",
                                                tbhub_bin, "exec", env)  # fmt: skip
                else:
                    seconds = measure_tbhub(storage, names, work, label, tbhub_bin, kind)
                measured.append(Sample(kind, index, seconds))
            tag = "warm-up" if index <= 0 else f"run {index}/{repeats}"
            log(f"{tag}: " + ", ".join(f"{s.kind} {s.seconds:.2f}s" for s in measured))
            if index > 0:
                samples += measured
    return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each (>= 1)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--tbhub-bin", default=TBHUB_BIN, help="the tbhub executable to measure")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        parser.error("--runs must be >= 1 and --warmup >= 0")

    samples = run(args.runs, args.warmup, args.tbhub_bin)
    medians = {k: median([s.seconds for s in samples if s.kind == k]) for k in KINDS}
    ratio = medians["docker"] / medians["exec"]
    ratio_zygote = medians["docker"] / medians["zygote"]
    summary = (
        f"docker_cold_start: exec median {medians['exec']:.2f}s, zygote median "
        f"{medians['zygote']:.2f}s, docker median {medians['docker']:.2f}s; docker/exec "
        f"{ratio:.2f}x (target <= {TARGET_RATIO}x), docker/zygote {ratio_zygote:.2f}x "
        f"(n={args.runs})"
    )
    if args.json:
        emit_json(
            {
                "benchmark": "docker_cold_start",
                "data": {"runs": RUNS, "steps": STEPS, "tags": TAGS},
                "samples": [asdict(s) for s in samples],
                "median_s": medians,
                "ratio_docker_exec": ratio,
                "ratio_docker_zygote": ratio_zygote,
                "target_ratio_max": TARGET_RATIO,
                "target_met": ratio <= TARGET_RATIO,
                "n": args.runs,
                "summary": summary,
            }
        )
        return 0
    print(f"{'run':>4} " + " ".join(f"{k + ' s':>9}" for k in KINDS))
    for index in range(1, args.runs + 1):
        row = [s.seconds for k in KINDS for s in samples if s.kind == k and s.index == index]
        print(f"{index:>4} " + " ".join(f"{v:9.2f}" for v in row))
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"target: docker/exec <= {TARGET_RATIO}x: {verdict}")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
