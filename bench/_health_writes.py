"""What bench/health_monitor_cpu.py's runs write each second, in its writer process and in
its `--feed passes` (light to import: the writer starts while the bench waits for it)."""

from __future__ import annotations

import math
import random
import time
from typing import BinaryIO

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from tbhub.storage.tfrecord import framed

TAGS = ("train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "eval/loss",
        "eval/accuracy", "throughput", "memory", "loss_scale", "tokens")  # fmt: skip


def write_second(handles: list[BinaryIO], step: int, rng: random.Random) -> None:
    """One second of writing to each run: 10 records per run, one per tag."""
    for handle in handles:
        chunk = []
        for index, tag in enumerate(TAGS):
            value = (1 + 2 * math.exp(-step / 300)) * math.exp(rng.gauss(0, 0.05)) * (index + 1)
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
            event = Event(wall_time=time.time(), step=step, summary=summary)
            chunk.append(framed(event.SerializeToString()))
        handle.write(b"".join(chunk))
