"""`tbhub upload` of a 1 GiB log tree through nginx, against `rsync -a` over ssh to loopback,
both durable at the end.

Without tbhub, a team ships logs with rsync over ssh, so that is the anchor. The tree (see
bench/_ingest.mixed_tree, cached under $TMPDIR/tbhub-bench-cache/): 24 runs of real event
files written by TensorBoard's own writer (a training file of about 16 MiB and an
evaluation one of 4 MiB each), 4 checkpoint-like files of 128 MiB of random bytes, and
about 2,450 small files of 1-32 KiB (per-step samples, configs, hparams).

- **rsync**: `rsync -a -e 'ssh -p PORT -i KEY ...' TREE/ USER@127.0.0.1:DEST/` to a
  private sshd on a loopback port (its own host key, config and authorized key in a scratch
  directory), then `ssh ... sync -f DEST` (syncfs: every file and directory of the
  filesystem on disk), the cheapest way to make the copy durable. `--rsync-durable fsync`
  fsyncs every file and directory of DEST one by one instead (`find DEST | xargs sync`).
- **upload**: `tbhub upload TREE --project bench --name N --json` (a fresh process, a new
  run each round) through nginx with a write token. The server answers each chunk only
  once it and every directory entry leading to it are on disk (fdatasync or fsync, then an
  fsync of each directory it created or renamed into), so at the end the tree is as
  durable as after rsync and syncfs; each chunk's SHA-256 is checked before it is written.
- **again**: the same two commands once more with nothing changed: rsync's size+mtime
  check against tbhub's listing of what the server holds (`rsync_again`, `upload_again`).

Before each side the page cache is flushed (`sync -f`, not timed), so neither pays for the
other's writes. Sides alternate after one unmeasured round; after each round the two copies
are compared (same files, same sizes; the warm-up round compares every byte). Reported:
every round, the medians and the throughput ratio median(rsync) / median(upload); the
target is >= 1.

    .venv/bin/python bench/upload_throughput.py [--runs 5] [--size-mib 1024]
        [--rsync-durable syncfs|fsync] [--json]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from _ingest import mixed_tree, serving, tree_arguments, tree_bytes
from _places import PROJECT, TBHUB_BIN
from _reports import report, timed_rounds
from _sshd import Ssh, private_sshd

TARGET = 1.0
SIDES = ("rsync", "upload", "rsync_again", "upload_again")


def timed_run(command: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=1800)  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def rsync_seconds(ssh: Ssh, tree: Path, dest: Path, durable: str) -> float:
    """rsync over ssh into `dest`, then made durable on the receiving side."""
    copy, _ = timed_run(["rsync", "-a", "-e", ssh.rsync_shell(), f"{tree}/",
                         f"{ssh.target}:{dest}/"])  # fmt: skip
    step = (f"sync -f {dest}" if durable == "syncfs"
            else f"find {dest} -print0 | xargs -0 sync --")  # fmt: skip
    flush, _ = timed_run([*ssh.command(), ssh.target, step])
    return copy + flush


def same_tree(left: Path, right: Path, *, every_byte: bool) -> None:
    """The two copies hold the same files with the same sizes (and bytes, if asked)."""

    def listing(root: Path) -> dict[str, int]:
        return {p.relative_to(root).as_posix(): p.stat().st_size
                for p in root.rglob("*") if p.is_file()}  # fmt: skip

    files = listing(left)
    assert files == listing(right), "the rsync and upload copies differ"
    if every_byte:
        for rel in files:
            assert filecmp.cmp(left / rel, right / rel, shallow=False), rel


def main() -> None:
    parser_args = tree_arguments(__doc__, runs=5, size_mib=1024, extra=_extra)
    tree = mixed_tree(parser_args.size_mib << 20)
    size = tree_bytes(tree)
    with serving("tbhub-bench-upload.") as (hub, api), private_sshd(hub.root / "ssh") as ssh:
        token = api.headers["Authorization"].split()[1]
        copies = hub.root / "rsync"
        copies.mkdir()
        run_root = hub.storage_root / PROJECT

        def flush() -> None:
            subprocess.run(["sync", "-f", str(hub.storage_root)], check=True)

        def one_round(index: int) -> dict[str, float]:
            dest = copies / f"copy-{index}"
            flush()
            rsync = rsync_seconds(ssh, tree, dest, parser_args.rsync_durable)
            flush()
            rsync_again = rsync_seconds(ssh, tree, dest, parser_args.rsync_durable)

            env = {
                **os.environ,
                "TBHUB_URL": hub.base_url,
                "TBHUB_TOKEN": token,
                "TBHUB_CLIENT_CONFIG": str(hub.root / f"client-{index}" / "client.json"),
            }
            command = [TBHUB_BIN, "upload", str(tree), "--project", PROJECT, "--json",
                       "--name", f"upload-{index}"]  # fmt: skip
            flush()
            upload, out = timed_run(command, env)
            sent = json.loads(out)
            assert sent["bytes_sent"] == size, (sent["bytes_sent"], size)
            flush()
            upload_again, out = timed_run(command, env)
            assert json.loads(out)["run"] == sent["run"], "the second upload made a new run"
            assert json.loads(out)["bytes_sent"] == 0, out

            run = api.get(f"/api/v1/projects/{PROJECT}/runs/{sent['run']}").json()
            run_dir = run_root / run["path"]
            same_tree(dest, run_dir, every_byte=index <= 0)
            same_tree(tree, dest, every_byte=False)
            shutil.rmtree(dest)
            shutil.rmtree(run_dir)
            return {"rsync": rsync, "upload": upload,
                    "rsync_again": rsync_again, "upload_again": upload_again}  # fmt: skip

        seconds, medians = timed_rounds(parser_args.runs, SIDES, one_round, lambda r: (
            f"rsync {r['rsync']:6.2f}s  upload {r['upload']:6.2f}s "
            f"({size / r['upload'] / 2**20:5.0f} MiB/s)  again: rsync {r['rsync_again']:5.2f}s "
            f"upload {r['upload_again']:5.2f}s"
        ))  # fmt: skip
    ratio = medians["rsync"] / medians["upload"]
    result = {
        "bytes": size,
        "rsync_durable": parser_args.rsync_durable,
        **{f"{side}_seconds": seconds[side] for side in SIDES},
        **{f"{side}_median": medians[side] for side in SIDES},
        "upload_mib_per_s": size / medians["upload"] / 2**20,
        "rsync_mib_per_s": size / medians["rsync"] / 2**20,
        "throughput_ratio": ratio,
        "again_ratio": medians["rsync_again"] / medians["upload_again"],
        "target": TARGET,
    }
    report(result, as_json=parser_args.json, to_log=True, text=(
        f"{size / 2**30:.2f} GiB: rsync+{parser_args.rsync_durable} {medians['rsync']:.2f}s, "
        f"tbhub upload {medians['upload']:.2f}s -> upload runs at {ratio:.2f}x the speed of "
        f"rsync over ssh (target >= {TARGET}); unchanged again: rsync "
        f"{medians['rsync_again']:.2f}s, upload {medians['upload_again']:.2f}s"
    ))  # fmt: skip


def _extra(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rsync-durable", choices=("syncfs", "fsync"), default="syncfs",
        help="how the rsync copy is made durable: sync -f DEST, or fsync of every file",
    )  # fmt: skip


if __name__ == "__main__":
    main()
