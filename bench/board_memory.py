"""Memory of 10 live boards: forked from the zygote (and exec'd) versus 10 bare TensorBoards.

What it measures, per round:

- bare: 10 `tensorboard --logdir <logdir i> --load_fast=true --port <p> --host 127.0.0.1`,
  each until its /data/runs lists all 20 runs; then the sum of PSS over each whole process
  tree (TensorBoard and its data server);
- zygote / exec: one `tbhub serve` with TBHUB_BOARD_LAUNCHER=zygote or =exec and 10
  projects on the same 10 logdirs; every board opened through nginx until /data/runs lists
  all 20 runs; then the sum of PSS over each board's process tree, plus (zygote) the
  zygote's own PSS, since it exists only for the boards. The control plane and nginx are
  left out on that side, as there is nothing like them on the bare side.

PSS comes from /proc/<pid>/smaps_rollup and is read 2 s after the last board is ready.
PSS splits each shared page between the processes that map it, so pages the boards share
with each other (libraries, and for the zygote the imported modules) count once in total.
Data: 20 runs x 5,000 steps x 5 scalar tags (tbhub.storage.sample_logs), hard-linked into 10
project directories. Rounds alternate the order of the sides; one unmeasured warm-up
round comes first. Reported: per-side medians of the total, the ratios to bare; the target
for the zygote is <= 0.75x.

    .venv/bin/python bench/board_memory.py [--rounds 3] [--boards 10] [--launchers zygote,exec]

Needs nginx. Uses ports 19000-19499 on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from _places import USER
from _processes import Group, ready_bare_tensorboard, temp_dir
from _reports import arguments, at_least, emit_report, measure_rounds, medians, subset_of
from _sample_data import cached_logdir
from _tbhub import Tbhub
from cold_start import TIMEOUT, time_to_runs

RUNS, STEPS, TAGS = 20, 5000, 5
TARGET_RATIO = {"zygote": 0.75}
SETTLE_SECONDS = 2.0


@dataclass
class Sample:
    kind: str  # "bare", "zygote" or "exec"
    round: int
    total_mib: float
    boards_mib: list[float]
    helper_mib: float = 0.0  # the zygote

    def __str__(self) -> str:
        return f"{self.kind} {self.total_mib:.0f} MiB"


def pss_bytes(pid: int) -> int:
    """PSS of one process from /proc/<pid>/smaps_rollup (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss_bytes(pid: int) -> int:
    """PSS of a process and every descendant (TensorBoard and its data server)."""
    try:
        members = [pid, *(child.pid for child in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return 0
    return sum(pss_bytes(member) for member in members)


def mib(value: float) -> float:
    return value / (1024 * 1024)


def measure_bare(logdirs: Sequence[Path], names: Sequence[str], work: Path, label: str) -> Sample:
    boards: list[Group] = []
    try:
        for index, logdir in enumerate(logdirs):
            log_path = work / f"bare-{label}-{index}.log"
            boards.append(ready_bare_tensorboard(logdir, names, log_path, timeout=TIMEOUT)[0])
        time.sleep(SETTLE_SECONDS)
        sizes = [tree_pss_bytes(board.pid) for board in boards]
        return Sample("bare", 0, mib(sum(sizes)), [mib(s) for s in sizes])
    finally:
        for board in boards:
            board.stop()


def measure_tbhub(
    storage: Path, projects: Sequence[str], names: Sequence[str], work: Path, label: str,
    launcher: str,
) -> Sample:  # fmt: skip
    hub = Tbhub(
        root=work / f"tbhub-{launcher}-{label}",
        storage_root=storage,
        extra_env={"TBHUB_BOARD_LAUNCHER": launcher, "TBHUB_IDLE_TIMEOUT": "3600"},
    )

    def create_projects() -> None:
        for project in projects[1:]:  # set_up created the first one
            hub.cli("admin", "project", "create", project, "--owner", USER)

    with hub.serving(prepare=create_projects):
        cookie = hub.sign_in()
        for project in projects:
            url = f"{hub.base_url}/boards/{project}/data/runs"
            time_to_runs(hub, cookie, url, names, f"board {project} to list its runs")
        time.sleep(SETTLE_SECONDS)
        states = [json.loads(p.read_text()) for p in hub.data_dir.glob("boards/*.json")]
        if sorted(s["project"] for s in states) != sorted(projects):
            raise RuntimeError(f"expected one board per project, found {states}")
        if any(s["launcher"] != launcher for s in states):
            raise RuntimeError(f"boards were not all started by {launcher}: {states}")
        sizes = [tree_pss_bytes(int(s["pid"])) for s in states]
        helper = 0
        if launcher == "zygote":
            helper = pss_bytes(
                int(json.loads((hub.data_dir / "zygote/zygote.json").read_text())["pid"])
            )
        total = sum(sizes) + helper
        return Sample(launcher, 0, mib(total), [mib(s) for s in sizes], mib(helper))


def run(rounds: int, warmup: int, boards: int, launchers: Sequence[str]) -> list[Sample]:
    cached, names = cached_logdir(runs=RUNS, steps=STEPS, tags=TAGS)
    projects = ["bench", *(f"bench-{i:02d}" for i in range(1, boards))]
    with temp_dir("tbhub-bench-memory.") as work:
        storage = work / "storage"
        for project in projects:
            shutil.copytree(cached, storage / project, copy_function=os.link)
        logdirs = [storage / project for project in projects]

        def one_round(index: int, label: str) -> list[Sample]:
            order = ["bare", *launchers]
            if index % 2 == 0:
                order.reverse()
            measured = []
            for kind in order:
                if kind == "bare":
                    sample = measure_bare(logdirs, names, work, label)
                else:
                    sample = measure_tbhub(storage, projects, names, work, label, kind)
                sample.round = index
                measured.append(sample)
            return measured

        return measure_rounds(rounds, warmup, one_round, str, noun="round")


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, warmup=1)
    parser.add_argument("--rounds", type=at_least(1), default=3, help="measured rounds")
    parser.add_argument("--boards", type=int, default=10, help="live boards per side (1-40)")
    parser.add_argument(
        "--launchers", type=subset_of(["exec", "zygote"]), default=["zygote", "exec"],
        help="tbhub launchers to measure, comma-separated",
    )  # fmt: skip
    args = parser.parse_args(argv)
    launchers = args.launchers
    if not 1 <= args.boards <= 40:
        parser.error("--boards takes 1-40")

    samples = run(args.rounds, args.warmup, args.boards, launchers)
    kinds = ["bare", *launchers]
    median_mib = medians(samples, kinds, lambda s: s.total_mib)
    ratios = {launcher: median_mib[launcher] / median_mib["bare"] for launcher in launchers}
    summary = (
        f"board_memory: {args.boards} boards, bare median {median_mib['bare']:.0f} MiB; "
        + (
            "; ".join(
                f"{launcher} median {median_mib[launcher]:.0f} MiB, ratio {ratios[launcher]:.2f}x"
                + (f" (target <= {TARGET_RATIO[launcher]}x)" if launcher in TARGET_RATIO else "")
                for launcher in launchers
            )
        )
        + f" (n={args.rounds})"
    )
    if args.json:
        emit_report(
            "board_memory",
            data={"runs": RUNS, "steps": STEPS, "tags": TAGS, "boards": args.boards},
            samples=samples,
            median_mib=median_mib,
            ratio=ratios,
            target_ratio_max=TARGET_RATIO,
            n=args.rounds,
            summary=summary,
        )
        return 0
    print(f"{'round':>5} " + " ".join(f"{kind + ' MiB':>11}" for kind in kinds))
    for index in range(1, args.rounds + 1):
        row = {s.kind: s.total_mib for s in samples if s.round == index}
        print(f"{index:>5} " + " ".join(f"{row[kind]:11.0f}" for kind in kinds))
    for sample in samples[-len(kinds) :]:
        per_board = ", ".join(f"{value:.0f}" for value in sample.boards_mib)
        helper = f" + zygote {sample.helper_mib:.0f}" if sample.helper_mib else ""
        print(f"last round, {sample.kind}: per board MiB [{per_board}]{helper}")
    for launcher, target in TARGET_RATIO.items():
        if launcher in ratios:
            verdict = "met" if ratios[launcher] <= target else "MISSED"
            print(f"target: {launcher} ratio <= {target}x: {verdict}")
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
