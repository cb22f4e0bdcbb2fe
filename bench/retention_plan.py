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
- tbhub in-process: `tbhub.jobs.retention.plan_retention()` alone.

Warm page cache for all (one unmeasured warm-up round). Runs alternate find, CLI,
in-process; reported: every run, the medians and the ratios median(tbhub) / median(find).
The target is <= 1.5x.

    .venv/bin/python bench/retention_plan.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN_DIR = Path(sys.executable).parent
CACHE = Path(tempfile.gettempdir()) / "tbhub-bench-cache" / "retention-100k-runs"
PROJECTS, RUNS_PER_PROJECT, FILES_PER_RUN, RUNS_PER_GROUP, EVENT_FILES = 20, 5000, 10, 100, 3


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_tree() -> Path:
    """<cache>/storage/proj-NN/group-NNN/run-NNNNN/ with 10 files each (3 event files),
    0-2 KiB each, last writes spread over 200 days. Built once; `complete` marks it done."""
    storage = CACHE / "storage"
    if (CACHE / "complete").exists():
        return storage
    shutil.rmtree(CACHE, ignore_errors=True)
    storage.mkdir(parents=True)
    rng = random.Random(7)
    payload = os.urandom(2048)
    now = time.time()
    started = time.monotonic()
    log(f"building {PROJECTS * RUNS_PER_PROJECT:,} runs in {storage} (once; cached) ...")
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
    (CACHE / "complete").write_text("built\n")
    return storage


def set_up_tbhub(root: Path, storage: Path) -> dict[str, str]:
    """A data dir with SQLite, migrated, with the 20 projects registered; returns its env."""
    env = {
        **os.environ,
        "TBHUB_DATA_DIR": str(root / "data"),
        "TBHUB_STORAGE_ROOT": str(storage),
        "TBHUB_CONFIG": str(root / "absent.toml"),
        "TBHUB_RETENTION_MAX_AGE_DAYS": "100",
    }
    tbhub = str(BIN_DIR / "tbhub")
    subprocess.run([tbhub, "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL)
    for p in range(PROJECTS):
        subprocess.run([tbhub, "admin", "project", "create", f"proj-{p:02d}"], env=env,
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    return env


def timed(command: list[str], env: dict[str, str] | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def plan_in_process(env: dict[str, str]) -> tuple[float, int]:
    from tbhub.db import make_engine, make_session_factory
    from tbhub.jobs.retention import plan_retention
    from tbhub.settings import Settings

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    storage = build_tree()
    results: dict[str, list[float]] = {"find": [], "tbhub_cli": [], "tbhub_in_process": []}
    with tempfile.TemporaryDirectory(prefix="tbhub-bench-plan.") as scratch:
        env = set_up_tbhub(Path(scratch), storage)
        find = ["find", str(storage), "-printf", "%s %T@\n"]
        cli = [str(BIN_DIR / "tbhub"), "admin", "retention", "plan", "--json"]
        removed = 0
        for i in range(args.runs + 1):
            a = timed(find)
            b = timed(cli, env)
            c, removed = plan_in_process(env)
            line = f"find {a:.2f}s, tbhub CLI {b:.2f}s, tbhub in-process {c:.2f}s"
            if i == 0:
                log(f"warm-up: {line}")
                continue
            results["find"].append(a)
            results["tbhub_cli"].append(b)
            results["tbhub_in_process"].append(c)
            log(f"run {i}: {line}")
    medians = {k: statistics.median(v) for k, v in results.items()}
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
        print(json.dumps(report, indent=2))
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
