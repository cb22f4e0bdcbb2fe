"""What an idle API worker holds: `tbhub serve` with TBHUB_API_WORKERS=2 on SQLite, each
worker's PSS (`/proc/<pid>/smaps_rollup`) after it has answered nothing for `--settle`
seconds, against the first process's in the same run (which also runs the supervisor, the
storage watcher and run health). Medians of `--runs` servers started one after another.

    .venv/bin/python bench/worker_memory.py [--runs 5] [--settle 8] [--json]
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

from _processes import temp_dir
from _reports import arguments, emit_report, median
from _tbhub import Tbhub

WORKERS = 2
MIB = 1024 * 1024


def pss_bytes(pid: int) -> int:
    """The process's proportional set size, from the kernel's rollup of its mappings."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no Pss line for process {pid}")


def one_server(settle: float) -> tuple[int, int]:
    """(first process's PSS, the first API worker's PSS) of one idle server."""
    with temp_dir("tbhub-bench-worker-memory.") as work:
        storage = work / "storage"
        storage.mkdir()
        hub = Tbhub(root=work / "tbhub", storage_root=storage,
                    extra_env={"TBHUB_API_WORKERS": str(WORKERS)})  # fmt: skip
        with hub.serving():
            time.sleep(settle)
            workers = json.loads((hub.data_dir / "api-workers.json").read_text())
            assert hub.server is not None
            return pss_bytes(hub.server.pid), pss_bytes(int(workers[0]["pid"]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5)
    parser.add_argument("--settle", type=float, default=8.0,
                        help="seconds the server runs idle before its memory is read")  # fmt: skip
    args = parser.parse_args(argv)
    samples = []
    for index in range(args.runs):
        first, worker = one_server(args.settle)
        samples.append({"first_process_bytes": first, "worker_bytes": worker})
        print(f"run {index + 1}/{args.runs}: first process {first / MIB:.1f} MiB, "
              f"worker {worker / MIB:.1f} MiB")  # fmt: skip
    first = median([s["first_process_bytes"] for s in samples])
    worker = median([s["worker_bytes"] for s in samples])
    summary = (f"worker_memory (medians, n={args.runs}): idle API worker {worker / MIB:.1f} MiB "
               f"PSS, first process {first / MIB:.1f} MiB: {worker / first:.2f}x")  # fmt: skip
    if args.json:
        emit_report("worker_memory", samples=samples, worker_bytes=worker,
                    first_process_bytes=first, summary=summary)  # fmt: skip
        return 0
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
