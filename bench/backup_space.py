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

import os
import statistics
import subprocess
from pathlib import Path

from _processes import temp_dir
from _reports import arguments, emit_json, log
from _tbhub import Tbhub
from backup_incremental import backdate, cached_tree


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
    hub = Tbhub(scratch, storage, extra_env={"TBHUB_BACKUP_TARGET": str(target)})
    hub.cli("db", "upgrade")
    hub.cli("admin", "backup", "run")
    [first] = [n for n in os.listdir(target) if n.endswith("Z")]
    older = backdate(target, first)
    hub.cli("admin", "backup", "run")
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
    args = arguments(__doc__, runs=5).parse_args()
    storage = cached_tree()
    results = []
    for i in range(args.runs):
        with temp_dir("tbhub-bench-space.") as scratch:
            results.append(one_run(storage, scratch))
        log(f"run {i + 1}: {results[-1]}")
    medians = {k: statistics.median(r[k] for r in results) for k in results[0]}  # ints stay ints
    extra_ratio = medians["second_snapshot_extra_bytes"] / medians["first_snapshot_bytes"]
    report = {"runs": results, "medians": medians, "extra_ratio": extra_ratio}
    if args.json:
        emit_json(report)
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
