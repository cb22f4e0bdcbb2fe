"""Sample data built once and cached under the temp dir (written with
tbhub.storage.sample_logs), and copied into a scratch storage root for each run."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _places import CACHE_ROOT, PROJECT
from _reports import log
from tbhub.storage.sample_logs import write_project


def cached(key: str, build: Callable[[Path], str]) -> Path:
    """`<cache>/<key>/`, made once: `build(directory)` fills a staging directory and returns
    what its `complete` marker says; then it takes the place of any half-made copy an
    interrupted run left."""
    root = CACHE_ROOT / key
    if (root / "complete").exists():
        return root
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=CACHE_ROOT))
    try:
        started = time.monotonic()
        log(f"building {key} into {root} (once; cached for later runs) ...")
        (staging / "complete").write_text(build(staging))
        shutil.rmtree(root, ignore_errors=True)
        staging.rename(root)
        log(f"  done in {time.monotonic() - started:.1f}s")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return root


def cached_logdir(*, runs: int, steps: int, tags: int) -> tuple[Path, list[str]]:
    """`<cache>/r<runs>-s<steps>-t<tags>/bench/`, holding `runs` runs; written on first use.

    The parent directory doubles as a tbhub storage root (its project `bench` is the logdir).
    Returns the logdir and the run names.
    """
    names = [f"run-{i:02d}" for i in range(runs)]

    def build(staging: Path) -> str:
        written = write_project(staging / PROJECT, runs=runs, steps=steps, tags=tags, prefix="run")
        assert written == names, (written, names)
        return f"{runs} runs x {steps} steps x {tags} tags\n"

    return cached(f"r{runs}-s{steps}-t{tags}", build) / PROJECT, names


def copied_logdir(work: Path, *, runs: int, steps: int, tags: int) -> tuple[Path, list[str]]:
    """A copy of the cached sample data as the bench project of a new storage root,
    work/storage (what a benchmark does there leaves the cache alone). Returns the storage
    root and the run names."""
    cached_dir, names = cached_logdir(runs=runs, steps=steps, tags=tags)
    storage = work / "storage"
    shutil.copytree(cached_dir, storage / PROJECT)
    return storage, names
