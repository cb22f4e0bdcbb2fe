"""What the upload and discovery benchmarks share: a log tree of real event files and a
running `tbhub serve` with an API token for the bench project."""

from __future__ import annotations

import argparse
import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from _places import PROJECT
from _processes import temp_dir
from _reports import arguments, at_least
from _sample_data import cached
from _tbhub import Tbhub

PNG_SIZE = 96  # pixels per side of each logged image


def _png(rng: np.random.Generator) -> bytes:
    """A noise image as PNG, written with the standard library's zlib only."""
    import struct
    import zlib

    pixels = rng.integers(0, 256, size=(PNG_SIZE, PNG_SIZE, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in pixels)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", PNG_SIZE, PNG_SIZE, 8, 2, 0, 0, 0)
    return b"".join([b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", header),
                     chunk(b"IDAT", zlib.compress(raw, 1)), chunk(b"IEND", b"")])  # fmt: skip


def write_mixed_run(logdir: Path, *, steps: int, seed: int) -> None:
    """A run as training jobs log it, with TensorBoard's own writer: 8 falling losses, 2
    histograms and 1 image per step."""
    rng = np.random.default_rng(seed)
    writer = EventFileWriter(str(logdir), max_queue_size=1000, flush_secs=120)
    try:
        for step in range(steps):
            # Losses as training logs them: falling, with noise (random values would look
            # like a divergence to the run-health detectors at every step).
            losses = [(1 + i) * np.exp(-step / 400) + 0.02 * rng.random() for i in range(8)]
            values = [Summary.Value(tag=f"loss/{i}", simple_value=float(loss))
                      for i, loss in enumerate(losses)]  # fmt: skip
            for i in range(2):
                counts = rng.integers(0, 100, size=30).astype(float)
                values.append(Summary.Value(tag=f"weights/{i}", histo=HistogramProto(
                    min=0.0, max=1.0, num=float(counts.sum()), sum=1.0, sum_squares=1.0,
                    bucket_limit=list(np.linspace(0, 1, 30)), bucket=list(counts))))  # fmt: skip
            image = Summary.Image(height=PNG_SIZE, width=PNG_SIZE, colorspace=3,
                                  encoded_image_string=_png(rng))  # fmt: skip
            values.append(Summary.Value(tag="samples", image=image))
            writer.add_event(
                Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=values))
            )
    finally:
        writer.close()


def log_tree(total_bytes: int, runs: int) -> Path:
    """`runs` runs of real event files adding up to about `total_bytes`; written once (one run
    with TensorBoard's writer, copied under the other names) and cached."""

    def build(staging: Path) -> str:
        first = staging / "tree" / "run-00"
        probe = staging / "probe"
        write_mixed_run(probe, steps=20, seed=0)
        step_bytes = sum(f.stat().st_size for f in probe.iterdir()) // 20
        steps = max(1, total_bytes // runs // step_bytes)
        write_mixed_run(first, steps=steps, seed=1)
        for index in range(1, runs):
            shutil.copytree(first, staging / "tree" / f"run-{index:02d}")
        return f"{runs} runs x {steps} steps\n"

    return cached(f"tree-{total_bytes >> 20}m-{runs}r", build) / "tree"


def mixed_tree(total_bytes: int, runs: int = 24) -> Path:
    """A log tree as teams ship it, about `total_bytes` in all, written once and cached:
    `runs` runs, each with a training event file of several MiB and an evaluation one
    (TensorBoard's own writer; one run written, copied under the other names), a config,
    hparams and ~100 small per-step sample files of 1-32 KiB; and a few runs with a large
    checkpoint-like file of random bytes, which take half of the tree."""

    def build(staging: Path) -> str:
        rng = np.random.default_rng(7)
        tree = staging / "tree"
        events_each = total_bytes * 7 // 16 // runs  # 7/16 in event files, 1/2 checkpoints
        probe = staging / "probe"
        write_mixed_run(probe, steps=20, seed=0)
        step_bytes = sum(f.stat().st_size for f in probe.iterdir()) // 20
        first = staging / "first"
        write_mixed_run(first / "train", steps=max(1, events_each * 4 // 5 // step_bytes), seed=1)
        write_mixed_run(first / "eval", steps=max(1, events_each // 5 // step_bytes), seed=2)
        small = 0
        for index in range(runs):
            run = tree / f"run-{index:02d}"
            for part in ("train", "eval"):
                (run / part).mkdir(parents=True)
                for source in (first / part).iterdir():
                    shutil.copyfile(source, run / part / source.name)
            (run / "hparams.yaml").write_text(f"lr: {1e-3 * (index + 1)}\nbatch: 64\n")
            (run / "config.json").write_text('{"model": "resnet50", "epochs": 90}\n' * 40)
            samples = run / "samples"
            samples.mkdir()
            for step in range(100):
                size = int(rng.integers(1 << 10, 32 << 10))
                (samples / f"step-{step:04d}.json").write_bytes(
                    rng.integers(32, 127, size=size, dtype=np.uint8).tobytes()
                )
                small += size
        checkpoints = max(1, runs // 4)
        each = max(1 << 20, total_bytes // 2 // checkpoints)
        for index in range(checkpoints):
            target = tree / f"run-{index * 4:02d}" / "checkpoints" / "model-final.pt"
            target.parent.mkdir()
            with open(target, "wb") as fh:
                for _ in range(each >> 20):
                    fh.write(rng.bytes(1 << 20))
        return (f"{runs} runs: event files of {events_each >> 20} MiB, {checkpoints} "
                f"checkpoints of {each >> 20} MiB, {runs * 102} small files\n")  # fmt: skip

    return cached(f"mixed-{total_bytes >> 20}m-{runs}r", build) / "tree"


def tree_arguments(
    doc: str, *, runs: int, size_mib: int,
    extra: Callable[[argparse.ArgumentParser], None] = lambda parser: None,
) -> argparse.Namespace:  # fmt: skip
    """--runs, --size-mib (of the log tree), --json, and what `extra` adds."""
    parser = arguments(doc, runs=runs)
    parser.add_argument("--size-mib", type=at_least(1), default=size_mib, help="the tree's size")
    extra(parser)
    return parser.parse_args()


def sized_tree(size_mib: int) -> tuple[Path, int]:
    """The cached tree of 32 runs adding up to about `size_mib` MiB (see log_tree), and its
    exact size in bytes."""
    tree = log_tree(size_mib << 20, runs=32)
    return tree, tree_bytes(tree)


def tree_bytes(tree: Path) -> int:
    return sum(f.stat().st_size for f in tree.rglob("*") if f.is_file())


@contextlib.contextmanager
def serving(prefix: str, **settings: str) -> Iterator[tuple[Tbhub, httpx.Client]]:
    """A started `tbhub serve` on a scratch storage root, and an API client with a write
    token for the bench project."""
    with temp_dir(prefix) as work:
        env = {f"TBHUB_{name.upper()}": value for name, value in settings.items()}
        hub = Tbhub(root=work, storage_root=work / "storage", extra_env=env)
        with hub.serving():
            headers = {"Authorization": f"Bearer {hub.write_token()}"}
            with httpx.Client(base_url=hub.base_url, headers=headers, timeout=60.0) as api:
                yield hub, api


def new_run(api: httpx.Client, name: str) -> dict[str, object]:
    response = api.post(f"/api/v1/projects/{PROJECT}/runs", json={"name": name})
    response.raise_for_status()
    return response.json()  # type: ignore[no-any-return]
