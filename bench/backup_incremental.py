"""Incremental backup: `tbhub admin backup run` against a plain `rsync -a --link-dest`.

The tree: 100,000 files of 8 KiB (2,000 runs x 50 files, 800 MB), generated once and cached
under $TMPDIR/tbhub-bench-cache/backup-100k-files/. Both sides start from the same complete
tbhub snapshot of it (the previous snapshot, with its manifest). Before each measured pair,
1% of the files (1,000, chosen at random) get new content and a new mtime; after the pair
they are put back exactly, so every run sees the same 1% change.

- plain: `rsync -a --delete --link-dest=<previous> <storage>/ <new dir>/`
- tbhub: `tbhub.jobs.backup.run_backup()`, what the scheduler in `tbhub serve` runs: the
  lock, the database rows, rsync with --link-dest (and -ii for the change list), the sha256
  manifest (reusing the previous checksums of hard-linked files, hashing the 1% changed),
  the rename that marks it complete, pruning, the audit event;
- tbhub CLI: the same as `tbhub admin backup run` in a fresh process, which adds Python
  start-up and imports (about 0.8 s here); reported beside it.

Each measured snapshot is deleted afterwards, unmeasured, followed by a `sync`. The order
alternates (plain, tbhub, CLI; then CLI, tbhub, plain) after one unmeasured warm-up round.
Reported: every run, the medians, and median(tbhub) / median(plain); the target is
<= 1.1x.

    .venv/bin/python bench/backup_incremental.py [--runs 5] [--json]
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
CACHE = Path(tempfile.gettempdir()) / "tbhub-bench-cache" / "backup-100k-files"
RUNS, FILES_PER_RUN, FILE_SIZE = 2000, 50, 8192
CHANGED_FRACTION = 0.01


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def cached_tree() -> Path:
    """<cache>/storage/bench/run-NNNN/events.out.tfevents.N.host; built once."""
    storage = CACHE / "storage"
    if (CACHE / "complete").exists():
        return storage
    shutil.rmtree(CACHE, ignore_errors=True)
    log(f"building {RUNS * FILES_PER_RUN:,} files in {storage} (once; cached) ...")
    started = time.monotonic()
    for r in range(RUNS):
        run = storage / "bench" / f"run-{r:04d}"
        run.mkdir(parents=True)
        for f in range(FILES_PER_RUN):
            (run / f"events.out.tfevents.{f}.host").write_bytes(os.urandom(FILE_SIZE))
    (CACHE / "complete").write_text("built\n")
    log(f"  done in {time.monotonic() - started:.0f}s")
    return storage


def all_files(storage: Path) -> list[Path]:
    return sorted(p for p in storage.rglob("events.out.tfevents.*") if p.is_file())


class Installation:
    """A tbhub data dir (SQLite) whose backup target holds one complete snapshot."""

    def __init__(self, root: Path, storage: Path) -> None:
        self.root = root
        self.target = root / "target"
        self.baseline = ""
        self.env = {
            **os.environ,
            "TBHUB_DATA_DIR": str(root / "data"),
            "TBHUB_STORAGE_ROOT": str(storage),
            "TBHUB_BACKUP_TARGET": str(self.target),
            "TBHUB_CONFIG": str(root / "absent.toml"),
        }
        self.tbhub("db", "upgrade")
        from tbhub.db import make_engine, make_session_factory
        from tbhub.settings import load_settings, prepare_runtime

        saved_env = dict(os.environ)
        os.environ.update(self.env)
        try:
            self.settings = prepare_runtime(load_settings())
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
        self.factory = make_session_factory(make_engine(self.settings.db_url))
        self.tbhub("admin", "backup", "run")
        [taken] = self.snapshots()
        # Date it years back: snapshot retention keeps one a day, and the baseline must stay.
        self.baseline = "20000101T000000Z"
        (self.target / taken).rename(self.target / self.baseline)
        (self.target / f"{taken}.sha256").rename(self.target / f"{self.baseline}.sha256")

    def tbhub(self, *args: str) -> float:
        started = time.perf_counter()
        subprocess.run([str(BIN_DIR / "tbhub"), *args], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        return time.perf_counter() - started

    def backup_in_process(self) -> float:
        from tbhub.jobs.backup import run_backup

        started = time.perf_counter()
        run_backup(self.factory, self.settings, actor="bench")
        return time.perf_counter() - started

    def snapshots(self) -> list[str]:
        names = os.listdir(self.target)
        return sorted(n for n in names if n.endswith("Z") and f"{n}.sha256" in names)

    def drop_newer_than_baseline(self) -> None:
        for name in os.listdir(self.target):
            if not name.startswith(self.baseline):
                path = self.target / name
                shutil.rmtree(path) if path.is_dir() else path.unlink()


def plain_rsync(storage: Path, previous: Path, scratch: Path) -> float:
    destination = scratch / "plain-new"
    started = time.perf_counter()
    subprocess.run(["rsync", "-a", "--delete", f"--link-dest={previous}", f"{storage}/",
                    f"{destination}/"], check=True)  # fmt: skip
    elapsed = time.perf_counter() - started
    shutil.rmtree(destination)
    return elapsed


def change_some(files: list[Path], rng: random.Random) -> list[tuple[Path, bytes, float]]:
    chosen = rng.sample(files, int(len(files) * CHANGED_FRACTION))
    saved = []
    for path in chosen:
        saved.append((path, path.read_bytes(), path.stat().st_mtime))
        path.write_bytes(os.urandom(FILE_SIZE))
    return saved


def put_back(saved: list[tuple[Path, bytes, float]]) -> None:
    for path, data, mtime in saved:
        path.write_bytes(data)
        os.utime(path, (mtime, mtime))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    storage = cached_tree()
    files = all_files(storage)
    rng = random.Random(1)
    results: dict[str, list[float]] = {"plain": [], "tbhub": [], "tbhub_cli": []}
    with tempfile.TemporaryDirectory(prefix="tbhub-bench-backup.") as scratch_name:
        scratch = Path(scratch_name)
        log("taking the baseline snapshot with tbhub ...")
        install = Installation(scratch / "tbhub", storage)
        previous = install.target / install.baseline
        for i in range(args.runs + 1):
            saved = change_some(files, rng)
            try:
                measured: dict[str, float] = {}
                # Alternate who goes first; after each, delete its snapshot and sync, so no
                # side runs while the filesystem still writes back the other's deletions.
                order = ["plain", "tbhub", "cli"] if i % 2 else ["cli", "tbhub", "plain"]
                for side in order:
                    if side == "plain":
                        measured[side] = plain_rsync(storage, previous, scratch)
                    else:
                        measured[side] = (
                            install.backup_in_process()
                            if side == "tbhub"
                            else install.tbhub("admin", "backup", "run")
                        )
                        assert len(install.snapshots()) == 2, install.snapshots()
                        install.drop_newer_than_baseline()
                    os.sync()
                plain, ours, cli = measured["plain"], measured["tbhub"], measured["cli"]
            finally:
                put_back(saved)
            line = f"plain {plain:.2f}s, tbhub {ours:.2f}s, tbhub CLI {cli:.2f}s"
            if i == 0:
                log(f"warm-up: {line}")
                continue
            results["plain"].append(plain)
            results["tbhub"].append(ours)
            results["tbhub_cli"].append(cli)
            log(f"run {i}: {line}")
    medians = {k: statistics.median(v) for k, v in results.items()}
    ratio = medians["tbhub"] / medians["plain"]
    report = {
        "files": len(files),
        "changed_files": int(len(files) * CHANGED_FRACTION),
        "runs": results,
        "median_seconds": medians,
        "ratio_tbhub_to_plain": ratio,
        "ratio_tbhub_cli_to_plain": medians["tbhub_cli"] / medians["plain"],
        "target": 1.1,
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{len(files):,} files, 1% changed; medians of {args.runs} runs")
        print(f"  plain rsync -a --link-dest: {medians['plain']:.2f}s")
        print(f"  tbhub run_backup():         {medians['tbhub']:.2f}s")
        print(f"  tbhub admin backup run:     {medians['tbhub_cli']:.2f}s (a new process)")
        print(
            f"  ratio: {ratio:.2f}x (target <= 1.1x); "
            f"CLI {medians['tbhub_cli'] / medians['plain']:.2f}x"
        )


if __name__ == "__main__":
    main()
