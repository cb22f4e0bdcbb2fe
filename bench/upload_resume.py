"""An upload killed half-way and started again sends only what the server does not hold.

Each sample runs `tbhub upload TREE --project bench --json` (a 256 MiB tree of real event
files, see bench/upload_throughput.py) through nginx, SIGKILLs it once the run's directory
on the server holds half of the tree, reads how many bytes the server holds, and runs the
same command again: it finds the same run (the CLI remembers it) and resumes. Reported per
sample: bytes left at the kill, bytes the second run sent, and their ratio (1.000 means
exactly the remainder was sent, nothing twice); then the medians.

    .venv/bin/python bench/upload_resume.py [--runs 3] [--size-mib 256] [--json]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from _ingest import serving, sized_tree, tree_arguments, tree_bytes
from _places import PROJECT, TBHUB_BIN
from _reports import log, median, report


def settled(run_dir: Path) -> int:
    """What the server holds once chunks already received when the client died are written."""
    last, stable_since = -1, time.monotonic()
    while time.monotonic() - stable_since < 1.0:
        now = tree_bytes(run_dir)
        if now != last:
            last, stable_since = now, time.monotonic()
        time.sleep(0.05)
    return last


def main() -> None:
    args = tree_arguments(__doc__, runs=3, size_mib=256)
    tree, total = sized_tree(args.size_mib)
    samples = []
    with serving("tbhub-bench-resume.") as (hub, api):
        token = api.headers["Authorization"].split()[1]
        for index in range(args.runs):
            config = hub.root / f"client-{index}" / "client.json"  # its own remembered runs
            env = {**os.environ, "TBHUB_URL": hub.base_url, "TBHUB_TOKEN": token,
                   "TBHUB_CLIENT_CONFIG": str(config)}  # fmt: skip
            command = [TBHUB_BIN, "upload", str(tree), "--project", PROJECT, "--json",
                       "--name", f"resume-{index}"]  # fmt: skip
            before = set((hub.storage_root / PROJECT).glob("*"))
            first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            run_dir = None
            while first.poll() is None:
                fresh = set((hub.storage_root / PROJECT).glob("*")) - before
                run_dir = run_dir or next(iter(fresh), None)
                if run_dir is not None and tree_bytes(run_dir) >= total // 2:
                    first.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.005)
            first.wait()
            assert run_dir is not None and first.returncode == -signal.SIGKILL, (
                first.returncode,
                (hub.root / "first.log").read_text(),
            )
            left = total - settled(run_dir)
            second = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            sent = json.loads(second.stdout)["bytes_sent"]
            assert tree_bytes(run_dir) == total
            samples.append({"bytes_left": left, "bytes_sent": sent, "ratio": sent / left})
            log(f"run {index + 1}/{args.runs}: {left:,} bytes left at the kill, resume sent "
                f"{sent:,} ({sent / left:.3f}x)")  # fmt: skip
    result = {"tree_bytes": total, "samples": samples,
              "median_ratio": median([s["ratio"] for s in samples])}  # fmt: skip
    report(result, as_json=args.json, to_log=True, text=(
        f"resume sent {result['median_ratio']:.3f}x the bytes left (median; 1.000 = only "
        "the remainder)"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
