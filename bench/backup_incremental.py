"""Incremental backup: `tbhub admin backup run` against a plain `rsync -a --link-dest`.

The tree: 100,000 files of 8 KiB (2,000 runs x 50 files, 800 MB), generated once and cached
under $TMPDIR/tbhub-bench-cache/backup-100k-files/. Both sides start from the same complete
tbhub snapshot of it (the previous snapshot, with its manifest). Before each measured pair,
1% of the files (1,000, chosen at random) get new content and a new mtime; after the pair
they are put back exactly, so every run sees the same 1% change.

- plain: `rsync -a --delete --link-dest=<previous> <storage>/ <new dir>/`
- tbhub: `tbhub.housekeeping.backup.run_backup()`, what the scheduler in `tbhub serve` runs: the
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

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

from _processes import temp_dir
from _reports import arguments, emit_json, log, timed_rounds
from _sample_data import cached
from _tbhub import Tbhub

CACHE_KEY = "backup-100k-files"
RUNS, FILES_PER_RUN, FILE_SIZE = 2000, 50, 8192
CHANGED_FRACTION = 0.01
SIDES = ("plain", "tbhub", "tbhub_cli")


def cached_tree() -> Path:
    """<cache>/backup-100k-files/storage/bench/run-NNNN/events.out.tfevents.N.host; built
    once."""

    def build(staging: Path) -> str:
        for r in range(RUNS):
            run = staging / "storage" / "bench" / f"run-{r:04d}"
            run.mkdir(parents=True)
            for f in range(FILES_PER_RUN):
                (run / f"events.out.tfevents.{f}.host").write_bytes(os.urandom(FILE_SIZE))
        return f"{RUNS * FILES_PER_RUN:,} files\n"

    return cached(CACHE_KEY, build) / "storage"


def backdate(target: Path, snapshot: str) -> str:
    """Rename a snapshot (and its manifest) in `target` to one taken years ago, so snapshot
    retention (one a day) keeps it beside the next; its new name."""
    older = "20000101T000000Z"
    (target / snapshot).rename(target / older)
    (target / f"{snapshot}.sha256").rename(target / f"{older}.sha256")
    return older


def all_files(storage: Path) -> list[Path]:
    return sorted(p for p in storage.rglob("events.out.tfevents.*") if p.is_file())


class Installation:
    """A tbhub data dir (SQLite) whose backup target holds one complete snapshot."""

    def __init__(self, root: Path, storage: Path) -> None:
        self.root = root
        self.target = root / "target"
        self.baseline = ""
        hub = Tbhub(root, storage, extra_env={"TBHUB_BACKUP_TARGET": str(self.target)})
        self.hub = hub
        hub.cli("db", "upgrade")
        from tbhub.core.db import make_engine, make_session_factory
        from tbhub.core.settings import load_settings, prepare_runtime

        saved_env = dict(os.environ)
        os.environ.update(hub.env)
        try:
            self.settings = prepare_runtime(load_settings())
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
        self.factory = make_session_factory(make_engine(self.settings.db_url))
        hub.cli("admin", "backup", "run")
        [taken] = self.snapshots()
        self.baseline = backdate(self.target, taken)  # the baseline must stay

    def backup_cli(self) -> float:
        return self.hub.timed_cli("admin", "backup", "run")

    def backup_in_process(self) -> float:
        from tbhub.housekeeping.backup import run_backup

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
    args = arguments(__doc__, runs=5).parse_args()
    storage = cached_tree()
    files = all_files(storage)
    rng = random.Random(1)
    with temp_dir("tbhub-bench-backup.") as scratch:
        log("taking the baseline snapshot with tbhub ...")
        install = Installation(scratch / "tbhub", storage)
        previous = install.target / install.baseline

        def one_round(index: int) -> dict[str, float]:
            saved = change_some(files, rng)
            try:
                measured: dict[str, float] = {}
                # Alternate who goes first; after each, delete its snapshot and sync, so no
                # side runs while the filesystem still writes back the other's deletions.
                order = ["plain", "tbhub", "cli"] if index % 2 else ["cli", "tbhub", "plain"]
                for side in order:
                    if side == "plain":
                        measured[side] = plain_rsync(storage, previous, scratch)
                    else:
                        measured[side] = (
                            install.backup_in_process() if side == "tbhub" else install.backup_cli()
                        )
                        assert len(install.snapshots()) == 2, install.snapshots()
                        install.drop_newer_than_baseline()
                    os.sync()
            finally:
                put_back(saved)
            return {"plain": measured["plain"], "tbhub": measured["tbhub"],
                    "tbhub_cli": measured["cli"]}  # fmt: skip

        results, medians = timed_rounds(args.runs, SIDES, one_round, lambda r: (
            f"plain {r['plain']:.2f}s, tbhub {r['tbhub']:.2f}s, tbhub CLI {r['tbhub_cli']:.2f}s"
        ))  # fmt: skip
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
        emit_json(report)
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
