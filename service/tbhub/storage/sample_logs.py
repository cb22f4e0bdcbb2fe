"""Event files written with TensorBoard's own event-file writer (demo data and tests)."""

from __future__ import annotations

import math
from pathlib import Path

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter


def scalar_value(run_index: int, tag_index: int, step: int) -> float:
    """A deterministic, loss-like curve per (run, tag), so tests can check exact values."""
    return float(math.exp(-step / (200.0 + 50 * run_index)) * (1 + tag_index) + 0.01 * (step % 7))


def write_run(
    logdir: Path,
    *,
    run_index: int = 0,
    steps: int = 100,
    tags: int = 2,
    wall_time_start: float = 1_700_000_000.0,
) -> None:
    """One run: `tags` scalar tags named metric/0.. with `steps` steps each."""
    logdir.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(logdir), max_queue_size=1000, flush_secs=120)
    try:
        for step in range(steps):
            summary = Summary(
                value=[
                    Summary.Value(tag=f"metric/{t}", simple_value=scalar_value(run_index, t, step))
                    for t in range(tags)
                ]
            )
            writer.add_event(Event(wall_time=wall_time_start + step, step=step, summary=summary))
    finally:
        writer.close()


def write_project(
    project_dir: Path, *, runs: int, steps: int, tags: int, prefix: str = "run"
) -> list[str]:
    names = [f"{prefix}-{i:02d}" for i in range(runs)]
    for i, name in enumerate(names):
        write_run(project_dir / name, run_index=i, steps=steps, tags=tags)
    return names
