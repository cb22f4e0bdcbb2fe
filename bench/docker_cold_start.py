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

from collections.abc import Sequence

from _processes import temp_dir
from _reports import arguments, emit_report, measure_rounds, medians
from _sample_data import copied_logdir
from _tbhub import docker_boards
from cold_start import DATA, RUNS, STEPS, TAGS, Sample, measure_tbhub, print_runs

TARGET_RATIO = 1.5  # docker / exec
KINDS = ("exec", "zygote", "docker")


def run(repeats: int, warmup: int, tbhub_bin: str) -> list[Sample]:
    with temp_dir("tbhub-bench-docker-cold.") as work:
        storage, names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)

        def one_round(index: int, label: str) -> list[Sample]:
            measured = []
            for kind in KINDS:
                if kind == "docker":
                    with docker_boards() as env:
                        seconds = measure_tbhub(storage, names, work, f"docker-{label}",
                                                tbhub_bin, "exec", env)  # fmt: skip
                else:
                    seconds = measure_tbhub(storage, names, work, label, tbhub_bin, kind)
                measured.append(Sample(kind, index, seconds))
            return measured

        return measure_rounds(repeats, warmup, one_round, str)


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, runs=5, warmup=1, tbhub_bin=True).parse_args(argv)
    samples = run(args.runs, args.warmup, args.tbhub_bin)
    median_s = medians(samples, KINDS, lambda s: s.seconds)
    ratio = median_s["docker"] / median_s["exec"]
    ratio_zygote = median_s["docker"] / median_s["zygote"]
    summary = (
        f"docker_cold_start: exec median {median_s['exec']:.2f}s, zygote median "
        f"{median_s['zygote']:.2f}s, docker median {median_s['docker']:.2f}s; docker/exec "
        f"{ratio:.2f}x (target <= {TARGET_RATIO}x), docker/zygote {ratio_zygote:.2f}x "
        f"(n={args.runs})"
    )
    if args.json:
        emit_report(
            "docker_cold_start",
            data=DATA,
            samples=samples,
            median_s=median_s,
            ratio_docker_exec=ratio,
            ratio_docker_zygote=ratio_zygote,
            target_ratio_max=TARGET_RATIO,
            target_met=ratio <= TARGET_RATIO,
            n=args.runs,
            summary=summary,
        )
        return 0
    print_runs(samples, KINDS, args.runs)
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"target: docker/exec <= {TARGET_RATIO}x: {verdict}")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
