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

import shutil
import subprocess
import time

from _ingest import new_run, serving, sized_tree, tree_arguments
from _reports import report, timed_rounds
from tbhub.client.upload import Uploader

TARGET = 0.5


def main() -> None:
    args = tree_arguments(__doc__, runs=5, size_mib=1024)
    tree, size = sized_tree(args.size_mib)
    with serving("tbhub-bench-upload.") as (hub, api):
        scratch = hub.storage_root / "copies"
        scratch.mkdir()

        def one_round(index: int) -> dict[str, float]:
            target = scratch / f"copy-{index}"
            started = time.perf_counter()
            subprocess.run(["cp", "-r", str(tree), str(target)], check=True)
            copy_seconds = time.perf_counter() - started
            shutil.rmtree(target)

            run = new_run(api, f"upload-{index}")
            uploader = Uploader(api, str(run["upload_url"]), tree)
            started = time.perf_counter()
            sent = uploader.sync(final=True)
            upload_seconds = time.perf_counter() - started
            assert sent.bytes_sent == size, (sent.bytes_sent, size)
            shutil.rmtree(hub.storage_root / "bench" / str(run["path"]))
            return {"cp": copy_seconds, "upload": upload_seconds}

        seconds, medians = timed_rounds(args.runs, ("cp", "upload"), one_round, lambda r: (
            f"cp {r['cp']:6.2f}s  upload {r['upload']:6.2f}s "
            f"({size / r['upload'] / 2**20:6.0f} MiB/s)"
        ))  # fmt: skip
    ratio = medians["cp"] / medians["upload"]
    result = {
        "bytes": size,
        "cp_seconds": seconds["cp"],
        "upload_seconds": seconds["upload"],
        "cp_median": medians["cp"],
        "upload_median": medians["upload"],
        "upload_mib_per_s": size / medians["upload"] / 2**20,
        "throughput_ratio": ratio,
        "target": TARGET,
    }
    report(result, as_json=args.json, to_log=True, text=(
        f"{size / 2**30:.2f} GiB: cp {medians['cp']:.2f}s, upload {medians['upload']:.2f}s "
        f"-> upload runs at {ratio:.2f}x the speed of cp (target >= {TARGET})"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
