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
tbhub.storage.sample_logs (TensorBoard's event-file writer), cached under
$TMPDIR/tbhub-bench-cache/ and copied into a scratch storage root that both sides read.

Every tbhub run uses a new `tbhub serve` with a fresh data dir (database) over the same
storage root. Restarting `tbhub serve` on the same data dir is not enough for a cold board:
the board's desired state ("running") is kept in the database, so the supervisor starts the
board again as soon as serve comes up, before any request.

Runs cycle bare, exec, zygote, bare, ...; one unmeasured warm-up round comes first.
Reported: every run, the medians and median(launcher) / median(bare). Targets: exec <= 1.3x,
zygote <= 0.6x. With `--profiler`, each launcher is measured again with the project's PyTorch
profiler plugin turned on (`tbhub admin board set bench --plugin pytorch_profiler` before
serve starts), reported as median(launcher+profiler) / median(launcher); target <= 1.1x (a
plugin must not slow the boards that load it).

Run it from the repository root (`make bench` runs it, then bench/warm_throughput.py):

    .venv/bin/python bench/cold_start.py [--runs 5] [--warmup 1] [--launchers exec,zygote]
        [--profiler] [--json]

Needs nginx on PATH (or in /usr/sbin). Uses ports 19000-19499 on 127.0.0.1 only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _places import PROJECT
from _processes import ready_bare_tensorboard, runs_listed, temp_dir, wait_for
from _reports import arguments, emit_report, measure_rounds, medians, subset_of
from _sample_data import copied_logdir
from _tbhub import Tbhub

RUNS, STEPS, TAGS = 20, 5000, 5
POLL_INTERVAL = 0.05
TIMEOUT = 180.0
TARGET_RATIO = {"exec": 1.3, "zygote": 0.6}
PROFILER = "pytorch_profiler"
PROFILER_TARGET = 1.1  # with the plugin against without, on the same launcher
DATA = {"runs": RUNS, "steps": STEPS, "tags": TAGS}  # what the JSON reports say of the data


@dataclass
class Sample:
    kind: str  # "bare", "exec" or "zygote"
    index: int  # 0 for the warm-up pair, then 1..n
    seconds: float

    def __str__(self) -> str:
        return f"{self.kind} {self.seconds:.2f}s"


def measure_bare(logdir: Path, names: Sequence[str], work: Path, label: str) -> float:
    """Seconds from spawning TensorBoard to /data/runs listing every run."""
    log_path = work / f"bare-{label}.log"
    board, seconds = ready_bare_tensorboard(
        logdir, names, log_path, timeout=TIMEOUT, interval=POLL_INTERVAL
    )
    board.stop()
    return seconds


def time_to_runs(hub: Tbhub, cookie: str, url: str, names: Sequence[str], what: str) -> float:
    """Seconds from the first signed-in GET of `url` (a board's /data/runs through nginx) to
    the first that answers 200 listing every run in `names`."""
    with hub.browser(cookie) as client:
        return wait_for(runs_listed(client, url, names), timeout=TIMEOUT, what=what,
                        interval=POLL_INTERVAL, alive=hub.alive)  # fmt: skip


def measure_tbhub(
    storage: Path, names: Sequence[str], work: Path, label: str, tbhub_bin: str, launcher: str,
    extra_env: dict[str, str] | None = None, plugins: Sequence[str] = (),
) -> float:  # fmt: skip
    """Seconds from the first board request through nginx to /data/runs listing every run.
    `extra_env`: more settings (bench/docker_cold_start.py puts boards in containers);
    `plugins`: turned on for the project before serve starts."""
    hub = Tbhub(
        root=work / f"tbhub-{launcher}-{label}",
        storage_root=storage,
        tbhub_bin=tbhub_bin,
        extra_env={"TBHUB_BOARD_LAUNCHER": launcher, **(extra_env or {})},
    )

    def turn_on() -> None:
        for plugin in plugins:
            hub.cli("admin", "board", "set", PROJECT, "--plugin", plugin)

    with hub.serving(turn_on):
        if launcher == "zygote":
            hub.wait_for_zygote()
        cookie = hub.sign_in()
        running = list(hub.data_dir.glob("boards/*.json"))
        if running:
            raise RuntimeError(f"the board is not cold: state files {running} exist already")
        url = hub.board_url("data/runs")
        return time_to_runs(hub, cookie, url, names, f"tbhub to list {len(names)} runs")


def print_runs(samples: Sequence[Sample], kinds: Sequence[str], runs: int) -> None:
    """A table of every measured run's seconds, a column per kind."""
    widths = {kind: max(9, len(kind) + 3) for kind in kinds}
    print(f"{'run':>4} " + " ".join(f"{kind + ' s':>{widths[kind]}}" for kind in kinds))
    for index in range(1, runs + 1):
        row = {s.kind: s.seconds for s in samples if s.index == index}
        print(f"{index:>4} " + " ".join(f"{row[kind]:{widths[kind]}.2f}" for kind in kinds))


def run(
    repeats: int, warmup: int, tbhub_bin: str, launchers: Sequence[str], profiler: bool
) -> list[Sample]:
    with temp_dir("tbhub-bench-cold.") as work:
        storage, names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
        logdir = storage / PROJECT

        def one_round(index: int, label: str) -> list[Sample]:
            measured = [Sample("bare", index, measure_bare(logdir, names, work, label))]
            for launcher in launchers:
                seconds = measure_tbhub(storage, names, work, label, tbhub_bin, launcher)
                measured.append(Sample(launcher, index, seconds))
                if profiler:
                    seconds = measure_tbhub(storage, names, work, f"{label}-p", tbhub_bin,
                                            launcher, plugins=[PROFILER])  # fmt: skip
                    measured.append(Sample(f"{launcher}+profiler", index, seconds))
            return measured

        return measure_rounds(repeats, warmup, one_round, str)


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5, warmup=1, tbhub_bin=True)
    parser.add_argument(
        "--launchers", type=subset_of(sorted(TARGET_RATIO)), default=["exec", "zygote"],
        help="tbhub board launchers to measure, comma-separated",
    )  # fmt: skip
    parser.add_argument("--profiler", action="store_true",
                        help="also each launcher with the PyTorch profiler plugin on")  # fmt: skip
    args = parser.parse_args(argv)
    launchers = args.launchers
    samples = run(args.runs, args.warmup, args.tbhub_bin, launchers, args.profiler)
    with_plugin = [f"{launcher}+profiler" for launcher in launchers] if args.profiler else []
    kinds = ["bare", *launchers, *with_plugin]
    median_s = medians(samples, kinds, lambda s: s.seconds)
    ratios = {launcher: median_s[launcher] / median_s["bare"] for launcher in launchers}
    plugin_ratios = {
        kind: median_s[kind] / median_s[kind.removesuffix("+profiler")] for kind in with_plugin
    }
    summary = (
        f"cold_start: bare median {median_s['bare']:.2f}s; "
        + "; ".join(
            f"{launcher} median {median_s[launcher]:.2f}s, ratio {ratios[launcher]:.2f}x "
            f"(target <= {TARGET_RATIO[launcher]}x)"
            for launcher in launchers
        )
        + "".join(
            f"; {kind} median {median_s[kind]:.2f}s, {plugin_ratios[kind]:.2f}x without the "
            f"plugin (target <= {PROFILER_TARGET}x)"
            for kind in with_plugin
        )
        + f" (n={args.runs})"
    )
    if args.json:
        emit_report(
            "cold_start",
            data=DATA,
            samples=samples,
            median_s=median_s,
            ratio=ratios,
            target_ratio_max={launcher: TARGET_RATIO[launcher] for launcher in launchers},
            target_met={
                launcher: ratios[launcher] <= TARGET_RATIO[launcher] for launcher in launchers
            },
            plugin_ratio=plugin_ratios,
            n=args.runs,
            summary=summary,
        )
        return 0
    print_runs(samples, kinds, args.runs)
    for launcher in launchers:
        verdict = "met" if ratios[launcher] <= TARGET_RATIO[launcher] else "MISSED"
        print(f"target: {launcher} ratio <= {TARGET_RATIO[launcher]:.1f}x: {verdict}")
    for kind in with_plugin:
        verdict = "met" if plugin_ratios[kind] <= PROFILER_TARGET else "MISSED"
        print(f"target: {kind} / without <= {PROFILER_TARGET}x: {verdict}")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
