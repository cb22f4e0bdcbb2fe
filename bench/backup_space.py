"""Extra disk space taken by a second snapshot of an unchanged tree.

The tree is the one bench/backup_incremental.py builds and caches (100,000 files of 8 KiB,
2,000 run directories). tbhub takes a snapshot (`tbhub admin backup run`), then a second one
with nothing changed. The extra space is what the second snapshot adds on disk:
`du -s -B1 <first> <second>` counts every hard-linked inode once, under the first
directory it meets, so the line for the second snapshot is exactly what it adds. The same
figure is reported for its manifest (`<name>.sha256`), and for the directory entries alone
(the second snapshot's directories x their size), which is the floor for any --link-dest
snapshot: rsync hard-links files, never directories.

Repeated --runs times on fresh targets; medians reported. Target: about 0 apart from the
directories.

    .venv/bin/python bench/backup_space.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from backup_incremental import BIN_DIR, cached_tree, log


def du_bytes(*paths: Path) -> list[int]:
    out = subprocess.run(["du", "-s", "-B1", *map(str, paths)], check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    return [int(line.split()[0]) for line in out.splitlines()]


def directory_bytes(root: Path) -> tuple[int, int]:
    """(number of directories, bytes they occupy) under root, itself included."""
    count = size = 0
    for dirpath, _dirs, _files in os.walk(root):
        count += 1
        size += os.lstat(dirpath).st_blocks * 512
    return count, size


def one_run(storage: Path, scratch: Path) -> dict[str, int]:
    target = scratch / "target"
    env = {
        **os.environ,
        "TBHUB_DATA_DIR": str(scratch / "data"),
        "TBHUB_STORAGE_ROOT": str(storage),
        "TBHUB_BACKUP_TARGET": str(target),
        "TBHUB_CONFIG": str(scratch / "absent.toml"),
    }
    tbhub = str(BIN_DIR / "tbhub")
    subprocess.run([tbhub, "db", "upgrade"], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(
        [tbhub, "admin", "backup", "run"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    [first] = [n for n in os.listdir(target) if n.endswith("Z")]
    # A day earlier, so snapshot retention (one a day) keeps both.
    older = "20000101T000000Z"
    (target / first).rename(target / older)
    (target / f"{first}.sha256").rename(target / f"{older}.sha256")
    subprocess.run(
        [tbhub, "admin", "backup", "run"], env=env, check=True, stdout=subprocess.DEVNULL
    )
    [second] = [n for n in os.listdir(target) if n.endswith("Z") and n != older]
    first_bytes, second_extra = du_bytes(target / older, target / second)
    dirs, dir_bytes = directory_bytes(target / second)
    manifest = (target / f"{second}.sha256").stat().st_blocks * 512
    return {
        "first_snapshot_bytes": first_bytes,
        "second_snapshot_extra_bytes": second_extra,
        "second_snapshot_directories": dirs,
        "second_snapshot_directory_bytes": dir_bytes,
        "extra_beyond_directories_bytes": second_extra - dir_bytes,
        "manifest_bytes": manifest,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    storage = cached_tree()
    results = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="tbhub-bench-space.") as scratch:
            results.append(one_run(storage, Path(scratch)))
        log(f"run {i + 1}: {results[-1]}")
    medians = {k: statistics.median(r[k] for r in results) for k in results[0]}
    extra_ratio = medians["second_snapshot_extra_bytes"] / medians["first_snapshot_bytes"]
    report = {"runs": results, "medians": medians, "extra_ratio": extra_ratio}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    mib = 1024 * 1024
    print(f"medians of {args.runs} runs, 100,000 files in 2,000 runs")
    print(f"  first snapshot:               {medians['first_snapshot_bytes'] / mib:9.1f} MiB")
    print(f"  second (unchanged) adds:      {medians['second_snapshot_extra_bytes'] / mib:9.1f} MiB"
          f" ({report['extra_ratio']:.2%} of the first)")  # fmt: skip
    print(f"    of which directories:       {medians['second_snapshot_directory_bytes'] / mib:9.1f}"
          f" MiB ({medians['second_snapshot_directories']:,.0f} directories)")  # fmt: skip
    print(f"    beyond the directories:     {medians['extra_beyond_directories_bytes']:9,.0f} B")
    print(f"  its manifest (.sha256 file):  {medians['manifest_bytes'] / mib:9.1f} MiB")


if __name__ == "__main__":
    main()
