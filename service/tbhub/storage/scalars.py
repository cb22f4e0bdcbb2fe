"""A run's scalar curves, read from its own event files a little at a time, for sparklines.

Each event file is read from where the last read stopped (its offset is remembered), only
when its size or mtime changed, and at most `budget` bytes per call, so a page of sparklines
costs bounded work however large the runs are. Records are TFRecord frames (length, CRC of
the length, Event proto, CRC); a frame cut short by a writer still writing ends the read
until more arrives. TensorBoard's own loaders keep a file open per event file and cannot
start at an offset, so with thousands of runs this reader opens, seeks and closes instead.

Files are opened by directory descriptor without following symlinks (DESIGN.md decision 9).
Per run at most `MAX_SERIES` curves of at most `2 * MAX_POINTS` points are kept: a curve
that grows past that drops every other point, which keeps its shape.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections import OrderedDict
from contextlib import closing
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from tbhub.core.errors import UnsafePath
from tbhub.storage.run_files import opened_run, walk_files
from tbhub.storage.scan import EVENT_FILE_PREFIX

MAX_POINTS = 256
MAX_SERIES = 32
MAX_FILES = 64  # event files looked at per run
MAX_DEPTH = 2  # subdirectories (train/, validation/ ...) of the run looked into
HEADER = struct.Struct("<QI")  # length, masked CRC-32C of the length
FOOTER = 4  # masked CRC-32C of the data (not checked: the proto parse catches garbage)
SCALARS_PLUGIN = "scalars"
Point = tuple[int, float]


@dataclass
class _File:
    size: int = 0
    mtime_ns: int = 0
    offset: int = 0
    dead: bool = False  # unreadable garbage: left alone until the file is replaced


@dataclass
class _Run:
    files: dict[str, _File] = field(default_factory=dict)  # relative path -> progress
    series: dict[str, list[Point]] = field(default_factory=dict)  # curve name -> points
    plugins: dict[str, str] = field(default_factory=dict)  # curve name -> plugin (TF2 tensors)
    lock: threading.Lock = field(default_factory=threading.Lock)


def load_reader() -> None:
    """Import what reading event files needs (TensorBoard's protos, its CRC), which the
    functions below import on first use so that the CLI never pays for it; `tbhub serve`
    calls this before it freezes its start-up objects out of the garbage collector's way."""
    from google.protobuf.message import DecodeError  # noqa: F401
    from tensorboard.compat.proto.event_pb2 import Event  # noqa: F401
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: F401
    from tensorboard.util import tensor_util  # noqa: F401


def _thin(points: list[Point]) -> list[Point]:
    """Every other point, always keeping the newest."""
    kept = points[::2]
    if kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def _add(run: _Run, name: str, step: int, value: float) -> None:
    points = run.series.get(name)
    if points is None:
        if len(run.series) >= MAX_SERIES:
            return
        points = run.series[name] = []
    points.append((step, value))
    if len(points) > 2 * MAX_POINTS:
        run.series[name] = _thin(points)


def _scalar_of(run: _Run, name: str, value: Any) -> float | None:
    """The float a Summary.Value holds, if it is a scalar: an old-style `simple_value`, or a
    tensor of the scalars plugin (its metadata comes with the first value of a tag only)."""
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind != "tensor":
        return None
    plugin = value.metadata.plugin_data.plugin_name
    if plugin:
        run.plugins[name] = plugin
    if run.plugins.get(name) != SCALARS_PLUGIN:
        return None
    from tensorboard.util import tensor_util

    array = tensor_util.make_ndarray(value.tensor)
    return float(array.item()) if array.size == 1 else None


def _frames(data: bytes) -> tuple[list[bytes], int, bool]:
    """The whole records at the start of `data`, the bytes they take, and whether a garbled
    frame was met (then the read stops there for good)."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    records: list[bytes] = []
    pos = 0
    while pos + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, pos)
        if masked_crc32c(data[pos : pos + 8]) != crc:
            return records, pos, True
        end = pos + HEADER.size + length + FOOTER
        if end > len(data):
            break  # cut short: the writer is still writing it
        records.append(data[pos + HEADER.size : pos + HEADER.size + length])
        pos = end
    return records, pos, False


def _read_file(run: _Run, prefix: str, dir_fd: int, name: str, state: _File, budget: int) -> int:
    """Read new records of one event file into the run's curves; the bytes read."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        data = os.pread(fd, min(budget, state.size - state.offset), state.offset)
    finally:
        os.close(fd)
    records, used, garbled = _frames(data)
    for record in records:
        try:
            event = Event.FromString(record)
        except DecodeError:
            garbled = True
            break
        for value in event.summary.value:
            curve = prefix + value.tag
            number = _scalar_of(run, curve, value)
            if number is not None and number == number and abs(number) != float("inf"):
                _add(run, curve, int(event.step), number)
    state.offset += used
    state.dead = garbled
    return len(data)


class ScalarCache:
    """Per run (project, path): file offsets and curves, for the newest `max_runs` runs read."""

    def __init__(self, storage_root: Path, *, max_runs: int = 2048, budget: int = 4 << 20):
        self.storage_root = storage_root
        self.max_runs = max_runs
        self.budget = budget
        self._runs: OrderedDict[tuple[str, str], _Run] = OrderedDict()
        self._lock = threading.Lock()

    def _entry(self, key: tuple[str, str]) -> _Run:
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = _Run()
            self._runs.move_to_end(key)
            while len(self._runs) > self.max_runs:
                self._runs.popitem(last=False)
            return run

    def curves(self, project: str, run_path: str) -> dict[str, list[Point]]:
        """The run's scalar curves (name -> (step, value) points), after reading what its
        event files gained since the last call, up to the byte budget."""
        run = self._entry((project, run_path))
        with run.lock:
            try:
                self._refresh(run, project, run_path)
            except UnsafePath:  # a symlink where the run should be: never followed
                return {}
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES):
                    raise
            return {name: list(points) for name, points in run.series.items()}

    def _refresh(self, run: _Run, project: str, run_path: str) -> None:
        budget = self.budget
        with (
            opened_run(self.storage_root, project, run_path) as fd,
            closing(walk_files(fd, max_depth=MAX_DEPTH)) as walk,
        ):
            event_files = (f for f in walk if f[2].startswith(EVENT_FILE_PREFIX))
            for path, dir_fd, name, st in islice(event_files, MAX_FILES):
                if budget <= 0:
                    break
                budget -= self._refresh_file(run, path, dir_fd, name, st, budget)

    def _refresh_file(
        self, run: _Run, path: str, dir_fd: int, name: str, st: os.stat_result, budget: int
    ) -> int:
        state = run.files.get(path)
        if state is None or st.st_size < state.offset:  # new, or replaced by a shorter file
            if state is not None:  # its points are mixed into the curves: start over
                run.files.clear()
                run.series.clear()
            state = run.files[path] = _File()
        if state.dead and (st.st_size, st.st_mtime_ns) == (state.size, state.mtime_ns):
            return 0
        state.size, state.mtime_ns = st.st_size, st.st_mtime_ns
        if state.offset >= st.st_size:
            return 0
        prefix = path[: -len(name)]  # the subdirectory (train/, validation/ ...) names the curve
        return _read_file(run, prefix, dir_fd, name, state, budget)


def pick_curve(curves: dict[str, list[Point]]) -> str | None:
    """The curve a sparkline shows: `loss`, else a curve named loss under some prefix
    (train/loss), else any curve with loss in its name (training ones first), else the first."""
    names = [name for name, points in curves.items() if points]
    if not names:
        return None
    lowered = {name: name.lower() for name in names}
    for wanted in (
        lambda n: lowered[n] == "loss",
        lambda n: lowered[n].rsplit("/", 1)[-1] == "loss" and "train" in lowered[n],
        lambda n: lowered[n].rsplit("/", 1)[-1] == "loss",
        lambda n: "loss" in lowered[n] and "train" in lowered[n],
        lambda n: "loss" in lowered[n],
    ):
        chosen = [n for n in names if wanted(n)]
        if chosen:
            return chosen[0]
    return names[0]
