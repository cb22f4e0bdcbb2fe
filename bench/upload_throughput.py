"""Upload of a 1 GiB log tree through nginx, against a local `cp -r` of the same tree.

The tree: 32 runs of real event files written by TensorBoard's own writer (8 scalars, 2
histograms and a 96x96 PNG per step; about 32 MiB each), cached under
$TMPDIR/tbhub-bench-cache/. Each upload registers a new run and sends the whole tree with
tbhub.client.upload.Uploader (what `tbhub upload` and `tbhub.client.Run` use: 8 MiB chunks,
SHA-256 on both sides, one fdatasync per chunk on the server) through nginx into a fresh run
directory; each copy is `cp -r` into a fresh directory on the same filesystem as the
server's storage. Both read a source that is in the page cache and neither forces the page
cache to disk at the end.

Runs alternate cp, upload, cp, ... after one unmeasured pair. Reported: every run, the
medians and the throughput ratio median(cp) / median(upload); the target is >= 0.5.

    .venv/bin/python bench/upload_throughput.py [--runs 5] [--size-mib 1024] [--json]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time

from _harness import emit_json, log, median
from _ingest import log_tree, new_run, serving, tree_bytes
from tbhub.client.upload import Uploader

TARGET = 0.5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tree = log_tree(args.size_mib << 20, runs=32)
    size = tree_bytes(tree)
    copies, uploads = [], []
    with serving("tbhub-bench-upload.") as (hub, api):
        scratch = hub.storage_root / "copies"
        scratch.mkdir()
        for index in range(args.runs + 1):
            target = scratch / f"copy-{index}"
            started = time.perf_counter()
            subprocess.run(["cp", "-r", str(tree), str(target)], check=True)
            copy_seconds = time.perf_counter() - started
            shutil.rmtree(target)

            run = new_run(api, f"upload-{index}")
            uploader = Uploader(api, str(run["upload_url"]), tree)
            started = time.perf_counter()
            report = uploader.sync(final=True)
            upload_seconds = time.perf_counter() - started
            assert report.bytes_sent == size, (report.bytes_sent, size)
            shutil.rmtree(hub.storage_root / "bench" / str(run["path"]))
            label = "warm-up" if index == 0 else f"run {index}/{args.runs}"
            log(f"{label}: cp {copy_seconds:6.2f}s  upload {upload_seconds:6.2f}s "
                f"({size / upload_seconds / 2**20:6.0f} MiB/s)")  # fmt: skip
            if index > 0:
                copies.append(copy_seconds)
                uploads.append(upload_seconds)
    ratio = median(copies) / median(uploads)
    result = {
        "bytes": size,
        "cp_seconds": copies,
        "upload_seconds": uploads,
        "cp_median": median(copies),
        "upload_median": median(uploads),
        "upload_mib_per_s": size / median(uploads) / 2**20,
        "throughput_ratio": ratio,
        "target": TARGET,
    }
    if args.json:
        emit_json(result)
    else:
        log(f"{size / 2**30:.2f} GiB: cp {median(copies):.2f}s, upload {median(uploads):.2f}s "
            f"-> upload runs at {ratio:.2f}x the speed of cp (target >= {TARGET})")  # fmt: skip


if __name__ == "__main__":
    main()
