"""Retention plan over 100,000 runs / 1,000,000 files, against `find -printf '%s %T@\n'`.

The tree: 20 projects x 5,000 runs (<project>/group-NNN/run-NNNNN/), each run with 10
files (3 event files), 0-2 KiB each, last writes spread over 200 days: 1,000,000 files in
110,000 directories. Built once (about a minute) and cached under
$TMPDIR/tbhub-bench-cache/retention-100k-runs/.

- find: `find <storage_root> -printf '%s %T@\n' > /dev/null`, the anchor: it stats every
  file and prints its size and mtime, which is the least a plan needs;
- tbhub CLI: `tbhub admin retention plan --json > /dev/null` in a fresh process (Python
  start-up and imports, the schema check, the policies from SQLite, the scan of all 20
  projects, the plan, the JSON of every run it would remove), with a 100-day age limit;
- tbhub in-process: `tbhub.housekeeping.retention.plan_retention()` alone.

Warm page cache for all (one unmeasured warm-up round). Runs alternate find, CLI,
in-process; reported: every run, the medians and the ratios median(tbhub) / median(find).
The target is <= 1.5x.

    .venv/bin/python bench/retention_plan.py [--runs 5] [--json]
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from _processes import temp_dir, timed
from _reports import arguments, emit_json, log, timed_rounds
from _sample_data import cached
from _tbhub import Tbhub

CACHE_KEY = "retention-100k-runs"
PROJECTS, RUNS_PER_PROJECT, FILES_PER_RUN, RUNS_PER_GROUP, EVENT_FILES = 20, 5000, 10, 100, 3
SIDES = ("find", "tbhub_cli", "tbhub_in_process")


def build_tree() -> Path:
    """<cache>/retention-100k-runs/storage/proj-NN/group-NNN/run-NNNNN/ with 10 files each
    (3 event files), 0-2 KiB each, last writes spread over 200 days. Built once."""
    return cached(CACHE_KEY, lambda staging: write_tree(staging / "storage")) / "storage"


def write_tree(storage: Path) -> str:
    storage.mkdir(parents=True)
    rng = random.Random(7)
    payload = os.urandom(2048)
    now = time.time()
    started = time.monotonic()
    for p in range(PROJECTS):
        for r in range(RUNS_PER_PROJECT):
            run = storage / f"proj-{p:02d}" / f"group-{r // RUNS_PER_GROUP:03d}" / f"run-{r:05d}"
            run.mkdir(parents=True)
            age = rng.uniform(0, 200 * 86400)
            for f in range(FILES_PER_RUN):
                name = (
                    f"events.out.tfevents.{1_700_000_000 + r}.host.{f}"
                    if f < EVENT_FILES
                    else f"asset-{f}.bin"
                )
                path = run / name
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, payload[: rng.randrange(0, 2048)])
                finally:
                    os.close(fd)
                stamp = now - age - f
                os.utime(path, (stamp, stamp))
        log(f"  project {p + 1}/{PROJECTS} after {time.monotonic() - started:.0f}s")
    return f"{PROJECTS * RUNS_PER_PROJECT:,} runs\n"


def set_up_tbhub(root: Path, storage: Path) -> Tbhub:
    """A data dir with SQLite, migrated, with the 20 projects registered."""
    hub = Tbhub(root, storage, extra_env={"TBHUB_RETENTION_MAX_AGE_DAYS": "100"})
    hub.cli("db", "upgrade")
    for p in range(PROJECTS):
        hub.cli("admin", "project", "create", f"proj-{p:02d}")
    return hub


def plan_in_process(env: dict[str, str]) -> tuple[float, int]:
    from tbhub.core.db import make_engine, make_session_factory
    from tbhub.core.settings import Settings
    from tbhub.housekeeping.retention import plan_retention

    settings = Settings(
        data_dir=Path(env["TBHUB_DATA_DIR"]),
        storage_root=Path(env["TBHUB_STORAGE_ROOT"]),
        retention_max_age_days=100,
    )
    engine = make_engine(settings.db_url)
    try:
        started = time.perf_counter()
        plans = plan_retention(make_session_factory(engine), settings)
        elapsed = time.perf_counter() - started
    finally:
        engine.dispose()
    return elapsed, sum(len(p.remove) for p in plans)


def main() -> None:
    args = arguments(__doc__, runs=5).parse_args()
    storage = build_tree()
    with temp_dir("tbhub-bench-plan.") as scratch:
        hub = set_up_tbhub(scratch, storage)
        find = ["find", str(storage), "-printf", "%s %T@\n"]
        removed = 0

        def one_round(index: int) -> dict[str, float]:
            nonlocal removed
            a = timed(find)
            b = hub.timed_cli("admin", "retention", "plan", "--json")
            c, removed = plan_in_process(hub.env)
            return {"find": a, "tbhub_cli": b, "tbhub_in_process": c}

        results, medians = timed_rounds(args.runs, SIDES, one_round, lambda r: (
            f"find {r['find']:.2f}s, tbhub CLI {r['tbhub_cli']:.2f}s, "
            f"tbhub in-process {r['tbhub_in_process']:.2f}s"
        ))  # fmt: skip
    report = {
        "runs_in_tree": PROJECTS * RUNS_PER_PROJECT,
        "files_in_tree": PROJECTS * RUNS_PER_PROJECT * FILES_PER_RUN,
        "runs_planned_for_removal": removed,
        "runs": results,
        "median_seconds": medians,
        "ratio_cli_to_find": medians["tbhub_cli"] / medians["find"],
        "ratio_in_process_to_find": medians["tbhub_in_process"] / medians["find"],
        "target": 1.5,
    }
    if args.json:
        emit_json(report)
        return
    print(f"100,000 runs / 1,000,000 files ({removed:,} runs planned for removal); "
          f"medians of {args.runs} runs")  # fmt: skip
    print(f"  find -printf '%s %T@\\n':        {medians['find']:.2f}s")
    print(f"  tbhub admin retention plan:      {medians['tbhub_cli']:.2f}s "
          f"({report['ratio_cli_to_find']:.2f}x)")  # fmt: skip
    print(f"  plan_retention() in-process:     {medians['tbhub_in_process']:.2f}s "
          f"({report['ratio_in_process_to_find']:.2f}x)")  # fmt: skip
    print("  target: <= 1.5x")


if __name__ == "__main__":
    main()
