"""Cold start of a compare board over 10 runs of 3 projects, against bare TensorBoard.

What it measures, per run:

- bare: the seconds from spawning
  `tensorboard --logdir <copy> --load_fast=true --port <p> --host 127.0.0.1`, on a directory
  holding the same 10 runs laid out as `<project>/<run>` (the names a compare board gives
  them), to the first `GET /data/runs` that answers 200 listing all 10;
- compare: a fresh `tbhub serve` (the default board launcher, the zygote, listening; the
  storage watcher has found the runs; the compare board was made with `POST /api/v1/compare`
  and has never run); the seconds from the first `GET /boards/<cmp-slug>/data/runs` through
  nginx (signed-in session cookie, `Accept: application/json`) to the first such request
  answering 200 listing all 10 runs. That covers nginx, the auth hook (read access to each of
  the 3 projects), the supervisor building the view of hard links and starting the board, its
  readiness probe and TensorBoard's start-up in a zygote fork.

Both poll every 50 ms. Data: 10 runs x 5,000 steps x 5 scalar tags written once with
tbhub.storage.sample_logs (cached under $TMPDIR/tbhub-bench-cache/), spread 4/3/3 over the projects
alpha, beta and gamma (each numbering its runs from run-00), copied into a scratch storage
root; the bare side reads a second copy, so neither shares the other's files.

Runs cycle bare, compare, bare, ...; one unmeasured warm-up round comes first. Reported:
every run, the medians and median(compare) / median(bare).

    .venv/bin/python bench/compare_cold_start.py [--runs 5] [--warmup 1] [--json]

Needs nginx on PATH (or in /usr/sbin). Ports from TBHUB_BENCH_PORTS (default 19000-19499) on
127.0.0.1 only.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import httpx

from _places import USER
from _processes import temp_dir, wait_for
from _reports import arguments, emit_report, measure_rounds, medians
from _sample_data import cached_logdir
from _tbhub import Tbhub
from cold_start import Sample, measure_bare, print_runs, time_to_runs

RUNS, STEPS, TAGS = 10, 5000, 5
SPLIT = {"alpha": 4, "beta": 3, "gamma": 3}


def lay_out(cached: Path, names: Sequence[str], root: Path) -> list[str]:
    """Copy the cached runs into `root/<project>/run-NN`; the names a compare board shows."""
    shown, source = [], iter(names)
    for project, count in SPLIT.items():
        for i in range(count):
            shutil.copytree(cached / next(source), root / project / f"run-{i:02d}")
            shown.append(f"{project}/run-{i:02d}")
    return shown


def make_compare_board(hub: Tbhub, client: httpx.Client) -> str:
    """Wait for the watcher to register every run, then make the compare board; its slug."""
    refs: list[str] = []

    def registered() -> bool:
        refs.clear()
        for project, count in SPLIT.items():
            page = client.get(f"/api/v1/projects/{project}/runs", params={"limit": 50})
            runs = page.json()["runs"] if page.status_code == 200 else []
            if len(runs) < count:
                return False
            refs.extend(f"{project}/{run['id']}" for run in runs)
        return True

    wait_for(registered, timeout=60, what="the storage watcher to register every run")
    client.headers["X-CSRF-Token"] = client.get("/api/v1/csrf").json()["token"]
    made = client.post("/api/v1/compare", json={"runs": refs, "name": "bench"})
    if made.status_code != 201:
        raise RuntimeError(f"POST /api/v1/compare: {made.status_code} {made.text}")
    return str(made.json()["slug"])


def measure_compare(
    storage: Path, shown: Sequence[str], work: Path, label: str, tbhub_bin: str
) -> float:
    hub = Tbhub(root=work / f"tbhub-{label}", storage_root=storage, tbhub_bin=tbhub_bin)

    def create_projects() -> None:
        for project in SPLIT:
            hub.cli("admin", "project", "create", project, "--owner", USER)

    with hub.serving(prepare=create_projects):
        hub.wait_for_zygote()
        cookie = hub.sign_in()
        with httpx.Client(base_url=hub.base_url, timeout=10.0,
                          headers={"Cookie": f"tbhub_session={cookie}"}) as api:  # fmt: skip
            slug = make_compare_board(hub, api)
        if list(hub.data_dir.glob("boards/*.json")):
            raise RuntimeError("a board runs already: this would not be a cold start")
        url = f"{hub.base_url}/boards/{slug}/data/runs"
        return time_to_runs(hub, cookie, url, shown, f"the compare board to list {len(shown)} runs")


def run(repeats: int, warmup: int, tbhub_bin: str) -> list[Sample]:
    cached, names = cached_logdir(runs=RUNS, steps=STEPS, tags=TAGS)
    with temp_dir("tbhub-bench-compare.") as work:
        storage, bare = work / "storage", work / "bare"
        shown = lay_out(cached, names, storage)
        lay_out(cached, names, bare)

        def one_round(index: int, label: str) -> list[Sample]:
            return [
                Sample("bare", index, measure_bare(bare, shown, work, label)),
                Sample("compare", index, measure_compare(storage, shown, work, label, tbhub_bin)),
            ]

        return measure_rounds(repeats, warmup, one_round, str)


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, runs=5, warmup=1, tbhub_bin=True).parse_args(argv)
    samples = run(args.runs, args.warmup, args.tbhub_bin)
    median_s = medians(samples, ("bare", "compare"), lambda s: s.seconds)
    ratio = median_s["compare"] / median_s["bare"]
    summary = (
        f"compare_cold_start: {RUNS} runs of {len(SPLIT)} projects; bare median "
        f"{median_s['bare']:.2f}s, compare board median {median_s['compare']:.2f}s, "
        f"ratio {ratio:.2f}x (n={args.runs})"
    )
    if args.json:
        emit_report(
            "compare_cold_start",
            data={"runs": RUNS, "steps": STEPS, "tags": TAGS, "projects": SPLIT},
            samples=samples,
            median_s=median_s,
            ratio=ratio,
            n=args.runs,
            summary=summary,
        )
        return 0
    print_runs(samples, ("bare", "compare"), args.runs)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
