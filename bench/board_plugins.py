"""What plugins cost a board: cold start with the PyTorch profiler loaded against without it,
and PSS with the operator's extra plugins against without them.

What it measures, per run, on one board process started the way the exec launcher starts it
(`python -m tbhub.supervisor.board_process <board_args>`):

- cold start: seconds from spawning the board to the first `GET /data/runs` answering 200
  listing all 20 runs (20 runs x 5,000 steps x 5 scalar tags), polled every 50 ms, for
  `bare` (a board as projects get it by default: the profiler off, its package not even
  imported) and `profiler` (a project that turned the PyTorch profiler on);
- PSS: the board's processes (TensorBoard and its data server) once the runs are listed and
  every plugin answered its first plugins listing, for `profiler` and `extras` (the tiny
  plugin package of tests/e2e/plugin_packages.py installed with the real
  `tbhub.supervisor.board_plugins.install_plugins` and its working plugin turned on).

Runs cycle bare, profiler, extras; one unmeasured warm-up round comes first. Reported: every
run, medians and the ratios median(profiler)/median(bare) (target <= 1.1x: a plugin must not
slow every board) and median PSS(extras)/median PSS(profiler). Exec is the launcher that pays
an import in full; the zygote imports the profiler once for every board it forks.

    .venv/bin/python bench/board_plugins.py [--runs 5] [--warmup 1] [--json]

Uses ports 19000-19499 on 127.0.0.1 only; pip installs the test wheel from a local directory
(no index).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from _places import HOST, PROJECT, free_port
from _processes import runs_listed, spawn, temp_dir, wait_for
from _reports import arguments, emit_report, log, measure_rounds, medians
from _sample_data import copied_logdir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.e2e.plugin_packages
from tests.e2e.plugin_packages import PACKAGE, VERSION, WORKS, build_wheel

from tbhub.supervisor.board_plugins import install_plugins
from tbhub.supervisor.board_process import (
    DISABLE_FLAG,
    ENABLE_FLAG,
    PLUGIN_PATH_FLAG,
    launcher_command,
)

RUNS, STEPS, TAGS = 20, 5000, 5
TIMEOUT = 180.0
TARGET_RATIO = 1.1
KINDS = ("bare", "profiler", "extras")
DATA = {"runs": RUNS, "steps": STEPS, "tags": TAGS}


@dataclass
class Sample:
    kind: str
    index: int
    seconds: float
    pss_mib: float

    def __str__(self) -> str:
        return f"{self.kind} {self.seconds:.2f}s {self.pss_mib:.1f} MiB"


def launcher_args(kind: str, plugin_dir: Path) -> list[str]:
    """board_args' own arguments for each kind: a board of a project that turned nothing on
    (the default), one that turned the profiler on, one with the extra plugin too."""
    if kind == "bare":
        return [f"{DISABLE_FLAG}=projector,pytorch_profiler", f"{PLUGIN_PATH_FLAG}={plugin_dir}"]
    extras = [f"{PLUGIN_PATH_FLAG}={plugin_dir}"]
    if kind == "extras":
        extras.append(f"{ENABLE_FLAG}={WORKS}")
    return [f"{DISABLE_FLAG}=projector", *extras]


def pss_mib(pid: int) -> float:
    process = psutil.Process(pid)
    tree = [process, *process.children(recursive=True)]
    return sum(p.memory_full_info().pss for p in tree) / 2**20


def measure(kind: str, logdir: Path, names: Sequence[str], plugin_dir: Path, work: Path,
            index: int, label: str) -> Sample:  # fmt: skip
    port = free_port()
    command = [*launcher_command(), *launcher_args(kind, plugin_dir), "--logdir", str(logdir),
               "--load_fast=true", "--host", HOST, "--port", str(port)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    board = spawn(kind, command, log_path=work / f"{kind}-{label}.log", env=env)
    try:
        with httpx.Client(timeout=5.0) as client:
            url = f"http://{HOST}:{port}/data/runs"
            seconds = wait_for(runs_listed(client, url, names), timeout=TIMEOUT,
                               what=f"{kind} board to list runs", alive=board.alive)  # fmt: skip
            listing = client.get(f"http://{HOST}:{port}/data/plugins_listing").json()
            if kind == "extras" and WORKS not in listing:
                raise RuntimeError(f"the extra plugin did not load:\n{board.log_tail()}")
            if kind != "bare" and "pytorch_profiler" not in listing:
                raise RuntimeError(f"the profiler did not load:\n{board.log_tail()}")
        return Sample(kind, index, seconds, pss_mib(board.process.pid))
    finally:
        board.stop()


def summarise(samples: Sequence[Sample]) -> dict[str, object]:
    """Medians per kind, the two ratios and a one-line summary."""
    seconds = medians(samples, KINDS, lambda s: s.seconds)
    pss = medians(samples, KINDS, lambda s: s.pss_mib)
    figures: dict[str, object] = {
        "seconds": seconds, "pss_mib": pss,
        "start_ratio": seconds["profiler"] / seconds["bare"],
        "pss_ratio": pss["extras"] / pss["profiler"],
    }  # fmt: skip
    figures["summary"] = (
        f"cold start: profiler {seconds['profiler']:.2f}s vs bare {seconds['bare']:.2f}s = "
        f"{figures['start_ratio']:.2f}x (target <= {TARGET_RATIO}x); PSS: extras "
        f"{pss['extras']:.1f} MiB vs profiler {pss['profiler']:.1f} MiB = "
        f"{figures['pss_ratio']:.2f}x (bare {pss['bare']:.1f} MiB)"
    )
    return figures


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, runs=5, warmup=1).parse_args(argv)
    with temp_dir("tbhub-bench-plugins.") as work:
        storage, names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
        logdir = storage / PROJECT
        wheels = work / "wheels"
        build_wheel(wheels)
        os.environ.update(PIP_FIND_LINKS=str(wheels), PIP_NO_INDEX="1")
        plugin_dir = work / "board-plugins"
        install_plugins([f"{PACKAGE}=={VERSION}"], plugin_dir)

        def one_round(index: int, label: str) -> list[Sample]:
            return [measure(k, logdir, names, plugin_dir, work, index, label) for k in KINDS]

        samples = measure_rounds(args.runs, args.warmup, one_round, str)
    figures = summarise(samples)
    summary = str(figures.pop("summary"))
    if args.json:
        emit_report("board_plugins", data=DATA, samples=samples, n=args.runs, summary=summary,
                    **figures)  # fmt: skip
    else:
        for sample in samples:
            print(sample.index, sample)
        print(summary)
    log(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
