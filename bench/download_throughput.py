"""Download of one 1 GiB file of a run through nginx, against a local `cp` of the same file.

The file is random bytes written into a run's directory on the server's storage (so it is
in the page cache, as is the source of `cp`). Each download is
`GET /api/v1/projects/<p>/runs/<id>/contents/<path>` with a read token through nginx into a
fresh file on the same filesystem (what `tbhub runs download` does, without its SHA-256
pass); each copy is `cp` of the file to a fresh path beside it. Neither forces the page
cache to disk at the end.

Rounds alternate cp, download after one unmeasured pair. Reported: every round, the
medians and the ratio median(cp) / median(download).

    .venv/bin/python bench/download_throughput.py [--runs 3] [--size-mib 1024] [--json]
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from _ingest import new_run, serving
from _places import PROJECT
from _reports import arguments, at_least, report, timed_rounds

CHUNK = 1 << 20


def write_random(path: Path, size: int) -> None:
    block = os.urandom(CHUNK)
    with path.open("wb") as sink:
        for _ in range(size // CHUNK):
            sink.write(block)


def main() -> None:
    parser = arguments(__doc__, runs=3)
    parser.add_argument("--size-mib", type=at_least(1), default=1024, help="the file's size")
    args = parser.parse_args()
    size = args.size_mib * CHUNK
    with serving("tbhub-bench-download.") as (hub, api):
        run = new_run(api, "download")
        source = Path(str(run["logdir"])) / "model.ckpt"
        write_random(source, size)
        url = f"/api/v1/projects/{PROJECT}/runs/{run['id']}/contents/model.ckpt"
        scratch = hub.root / "copies"
        scratch.mkdir()

        def one_round(index: int) -> dict[str, float]:
            target = scratch / f"copy-{index}"
            started = time.perf_counter()
            subprocess.run(["cp", str(source), str(target)], check=True)
            copy_seconds = time.perf_counter() - started
            target.unlink()
            started = time.perf_counter()
            with api.stream("GET", url) as response, target.open("wb") as sink:
                response.raise_for_status()
                for chunk in response.iter_bytes(CHUNK):
                    sink.write(chunk)
            download_seconds = time.perf_counter() - started
            assert target.stat().st_size == size, (target.stat().st_size, size)
            target.unlink()
            return {"cp": copy_seconds, "download": download_seconds}

        seconds, medians = timed_rounds(args.runs, ("cp", "download"), one_round, lambda r: (
            f"cp {r['cp']:6.2f}s  download {r['download']:6.2f}s "
            f"({size / r['download'] / 2**20:6.0f} MiB/s)"
        ))  # fmt: skip
    ratio = medians["cp"] / medians["download"]
    result = {
        "bytes": size,
        "cp_seconds": seconds["cp"],
        "download_seconds": seconds["download"],
        "cp_median": medians["cp"],
        "download_median": medians["download"],
        "download_mib_per_s": size / medians["download"] / 2**20,
        "throughput_ratio": ratio,
    }
    report(result, as_json=args.json, to_log=True, text=(
        f"{size / 2**30:.2f} GiB: cp {medians['cp']:.2f}s, download {medians['download']:.2f}s "
        f"-> the download runs at {ratio:.2f}x the speed of cp"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
