"""Throughput of tbhub's event-file reader (storage/event_reader.py, what the run-health monitor
and the sparklines read through) against TensorBoard's own EventFileLoader, on one large event
file: both read every scalar of the file, start to end, in this process.

The file is written once by TensorBoard's own EventFileWriter (cached in the temp dir): `--values`
scalars over 10 tags, as TF1 simple values (what torch's SummaryWriter writes) or, with
`--format tensor`, as TF2 tensor summaries (what TensorBoard's and Keras' writers write).
TensorBoard's loader runs as installed here, without TensorFlow: its own record reader, which
checks both CRCs in Python, as tbhub's does. Each round reads the file with both, in
alternating order; the figure is the median of each side's seconds and the ratio
TensorBoard / tbhub (above 1: tbhub is faster). Target: >= 1x.

    .venv/bin/python bench/health_reader.py [--values 200000] [--format simple|tensor]
        [--runs 5] [--json]
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _reports import arguments, emit_report, median
from tbhub.storage.event_reader import read_scalars

TAGS = ("train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "eval/loss",
        "eval/accuracy", "throughput", "memory", "loss_scale", "tokens")  # fmt: skip
TARGET_RATIO = 1.0
CACHE = Path(tempfile.gettempdir()) / "tbhub-bench-cache"


@dataclass
class Sample:
    round: int
    reader: str  # tbhub | tensorboard
    seconds: float
    values: int
    mib_per_second: float


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def large_event_file(values: int, form: str) -> Path:
    """One event file of `values` scalars, written once by TensorBoard's EventFileWriter."""
    directory = CACHE / f"health-reader-{form}-{values}"
    done = directory / "complete"
    if done.exists():
        return next(directory.glob("events.out.tfevents.*"))
    import numpy as np
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
    from tensorboard.util import tensor_util

    for stale in directory.glob("events.out.tfevents.*"):
        stale.unlink()
    directory.mkdir(parents=True, exist_ok=True)
    log(f"writing {values:,} scalars ({form}) into {directory} (once) ...")
    started = time.monotonic()
    writer = EventFileWriter(str(directory), max_queue_size=1000, flush_secs=3600)
    scalars = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="scalars"))
    for index in range(values):
        step, tag = divmod(index, len(TAGS))
        number = 1.0 / (1 + step) + 0.01 * tag
        if form == "simple":
            value = Summary.Value(tag=TAGS[tag], simple_value=number)
        else:
            tensor = tensor_util.make_tensor_proto(np.float32(number))
            value = Summary.Value(tag=TAGS[tag], tensor=tensor,
                                  metadata=scalars if step == 0 else None)  # fmt: skip
        writer.add_event(Event(wall_time=1.7e9 + step, step=step, summary=Summary(value=[value])))
    writer.close()
    done.write_text(f"{values} {form}\n")
    log(f"  done in {time.monotonic() - started:.1f}s")
    return next(directory.glob("events.out.tfevents.*"))


def read_with_tbhub(path: Path) -> list[float]:
    return [point.value for point in read_scalars(path)]


def read_with_tensorboard(path: Path) -> list[float]:
    """What TensorBoard does with each event: its scalars, simple or tensor."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    found = []
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                found.append(value.simple_value)
            elif kind == "tensor":
                found.append(float(tensor_util.make_ndarray(value.tensor).item()))
    return found


def main() -> None:
    parser = arguments(__doc__, runs=5)
    parser.add_argument("--values", type=int, default=200_000, help="scalars in the file")
    parser.add_argument("--format", choices=("simple", "tensor"), default="simple")
    args = parser.parse_args()
    path = large_event_file(args.values, args.format)
    size = path.stat().st_size
    readers = {"tbhub": read_with_tbhub, "tensorboard": read_with_tensorboard}
    # Both must read the same numbers, or the comparison means nothing.
    expected = read_with_tensorboard(path)
    assert len(expected) == args.values, (len(expected), args.values)
    assert read_with_tbhub(path) == expected, "the two readers disagree on the file's values"
    samples: list[Sample] = []
    for index in range(1, args.runs + 1):
        order = list(readers) if index % 2 else list(reversed(readers))
        for name in order:
            started = time.perf_counter()
            count = len(readers[name](path))
            seconds = time.perf_counter() - started
            samples.append(Sample(index, name, seconds, count, size / 2**20 / seconds))
            log(f"round {index}/{args.runs}: {name} {seconds:.2f}s "
                f"({size / 2**20 / seconds:.1f} MiB/s)")  # fmt: skip
    seconds = {name: median([s.seconds for s in samples if s.reader == name]) for name in readers}
    ratio = seconds["tensorboard"] / seconds["tbhub"]
    summary = (f"{args.values:,} scalars ({args.format}, {size / 2**20:.1f} MiB): tbhub "
               f"{seconds['tbhub']:.2f}s, TensorBoard's EventFileLoader "
               f"{seconds['tensorboard']:.2f}s; tbhub is {ratio:.2f}x as fast "
               f"(target >= {TARGET_RATIO:g}x)")  # fmt: skip
    if args.json:
        emit_report("health_reader", data={"values": args.values, "format": args.format,
                                           "bytes": size, "tags": len(TAGS)},
                    samples=samples, n=args.runs, summary=summary,
                    median_seconds=seconds, ratio=ratio, target_ratio=TARGET_RATIO)  # fmt: skip
    else:
        print(summary)


if __name__ == "__main__":
    main()
