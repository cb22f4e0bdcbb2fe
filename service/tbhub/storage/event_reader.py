"""The one incremental reader of a run's event files: the sparklines (storage/scalars.py) and
the run-health monitor (health/monitor.py) both read through a `RunFollower`, so no record
is parsed twice in one process.

A follower keeps, per event file of its run, where the last read stopped, and reads on from
there at most `budget` bytes per call. Records are TFRecord frames (length, masked CRC-32C of
the length, an Event proto, masked CRC-32C of the proto); both CRCs are checked
(storage/frame_check.py).

- A frame cut short (a writer still writing) ends the read of that file until it grows.
- A frame whose CRC does not match is retried: when the file changes, and at the latest
  after `RETRY_SECONDS` (NFS can show a file's length before its data, and a writer may fill
  a zero-filled file in place later). A whole frame whose data still fails its CRC after
  `SKIP_AFTER_SECONDS` while later frames exist is skipped, so one bad record never stops a
  file for good; a broken length header (no way to know where the frame ends) waits.
- A file that shrank or was replaced (another inode) makes the follower start over from the
  start of every file: `Reading.reset` tells the caller to drop what it built from before.

TensorBoard's loaders keep a file open per event file and cannot start at an offset, so with
thousands of runs this reader opens, seeks and closes instead. Files are opened by directory
descriptor without following symlinks (DESIGN.md decision 9).

Scalars come from TF1 `simple_value`s and TF2 tensors of the scalars plugin (whose metadata
comes with a tag's first value only); histograms (TF1 `histo` and TF2 tensors of the
histograms plugin) only when asked, reduced to whether every number in them is finite.
Hyperparameters and metrics the training code wrote (the hparams plugin's summaries, the HF
Trainer's `args` text) are gathered per run by storage/logged_params.py; a reading carries
them when they changed.
"""

from __future__ import annotations

import errno
import math
import os
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tbhub.core.errors import UnsafePath
from tbhub.storage.event_decode import Decoded, decode_other, decode_simple
from tbhub.storage.frame_check import BAD_DATA, BAD_LENGTH, TORN, frame_at, masked
from tbhub.storage.fsops import DIR_FLAGS, open_below, split_relative
from tbhub.storage.hparams_file import FILE_NAME as OWN_HPARAMS_FILE
from tbhub.storage.logged_params import (
    ARGS_TAGS,
    HPARAMS_PLUGIN,
    TEXT_PLUGIN,
    LoggedParams,
    LoggedValue,
)
from tbhub.storage.run_files import opened_run
from tbhub.storage.scan import EVENT_FILE_PREFIX
from tbhub.storage.tfrecord import HEADER, HEADER_BYTES, RECORD_OVERHEAD

MAX_FILES = 64  # event files looked at per run
MAX_DEPTH = 2  # subdirectories (train/, validation/ ...) of the run looked into
RETRY_SECONDS = 30.0  # a frame that failed its CRC is read again at least this often
SKIP_AFTER_SECONDS = 120.0  # ... and skipped when its data is still bad this long after
RELIST_SECONDS = 10.0  # a directory whose mtime stayed is listed again at least this often
RACY_NS = 2_000_000_000  # a listing made this soon after its directory's mtime is not trusted
MAX_TAGS = 1024  # curve names remembered per subdirectory of a run
SCALARS_PLUGIN = "scalars"
HISTOGRAMS_PLUGIN = "histograms"
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.EACCES)
_FLOAT = struct.Struct("<f")
_DOUBLE = struct.Struct("<d")
_LENGTH = struct.Struct("<Q").unpack_from
DT_FLOAT, DT_DOUBLE = 1, 2  # TensorFlow's DataType numbers


class ScalarPoint(NamedTuple):
    tag: str  # the curve: the subdirectory inside the run (train/ ...) and the tag
    step: int
    wall_time: float
    value: float  # NaN and infinities included: they are what health looks for


_make_point = tuple.__new__


class HistogramPoint(NamedTuple):
    tag: str
    step: int
    wall_time: float
    finite: bool  # every edge, count and moment of the histogram is a finite number


@dataclass
class Reading:
    """What one `RunFollower.read` found."""

    scalars: list[ScalarPoint] = field(default_factory=list)
    histograms: list[HistogramPoint] = field(default_factory=list)
    reset: bool = False  # started over from the start: drop what was built before
    bytes_read: int = 0
    behind: bool = False  # the budget ran out before every file was read to its end
    # The hyperparameters and metrics the run's training code wrote, when they changed.
    params: tuple[dict[str, LoggedValue], dict[str, float]] | None = None


@dataclass
class _Listing:
    """One directory of a run as last listed: its event files and subdirectories, by name."""

    inode: int
    mtime_ns: int
    listed_at: float  # by the follower's clock
    trusted: bool  # listed long enough after its mtime that a change since would show in it
    files: list[str]
    subdirs: list[str]


@dataclass
class _File:
    size: int = 0
    mtime_ns: int = 0
    inode: int = 0
    offset: int = 0
    bad_at: int | None = None  # a frame there failed its CRC (at `bad_since`)
    bad_since: float = 0.0
    tried_at: float = 0.0  # when the bad frame was last read


def _list(fd: int, st: os.stat_result, now: float) -> _Listing:
    """List the directory `fd` (whose stat is `st`) for `RunFollower._event_files`. A listing
    made within `RACY_NS` of the directory's mtime is not trusted: on a filesystem with coarse
    times a file added in the same tick would leave the mtime as it was."""
    files, subdirs = [], []
    with os.scandir(fd) as scanner:
        for entry in scanner:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            elif entry.name.startswith(EVENT_FILE_PREFIX) and entry.is_file(follow_symlinks=False):
                files.append(entry.name)
    trusted = st.st_mtime_ns < time.time_ns() - RACY_NS
    return _Listing(st.st_ino, st.st_mtime_ns, now, trusted, sorted(files),
                    sorted(subdirs))  # fmt: skip


def load_reader() -> None:
    """Import what reading event files needs (TensorBoard's protos), which the functions
    below import on first use so that the CLI never pays for it; `tbhub serve` and each API
    worker call this before they freeze their start-up objects out of the garbage
    collector's way. Not TensorBoard's tensor_util, which brings numpy (8 MiB in every
    process): only a scalar in an uncommon layout or a histogram's finiteness needs it,
    and it is imported then."""
    from google.protobuf.message import DecodeError  # noqa: F401
    from tensorboard.compat.proto.event_pb2 import Event  # noqa: F401


def _tensor_scalar(tensor: Any) -> float | None:
    """The one number of a scalar tensor proto; the common layouts without numpy."""
    if len(tensor.float_val) == 1:
        return float(tensor.float_val[0])
    if len(tensor.double_val) == 1:
        return float(tensor.double_val[0])
    content = tensor.tensor_content
    if tensor.dtype == DT_FLOAT and len(content) == 4:
        return float(_FLOAT.unpack(content)[0])
    if tensor.dtype == DT_DOUBLE and len(content) == 8:
        return float(_DOUBLE.unpack(content)[0])
    from tensorboard.util import tensor_util

    try:
        array = tensor_util.make_ndarray(tensor)
    except (TypeError, ValueError):
        return None
    return float(array.item()) if array.size == 1 and array.dtype.kind in "fiu" else None


def _tensor_finite(tensor: Any) -> bool:
    from tensorboard.util import tensor_util

    try:
        array = tensor_util.make_ndarray(tensor)
    except (TypeError, ValueError):
        return True  # not numbers: nothing to call non-finite
    import numpy

    return array.dtype.kind not in "fc" or bool(numpy.isfinite(array).all())


def _histo_finite(histo: Any) -> bool:
    numbers = (histo.min, histo.max, histo.num, histo.sum, histo.sum_squares)
    return all(map(math.isfinite, numbers)) and all(map(math.isfinite, histo.bucket))


class RunFollower:
    """One run's event files (`<storage_root>/<project>/<run_path>`, and up to `MAX_DEPTH`
    subdirectories of it), each read on from where the last read stopped."""

    def __init__(
        self,
        storage_root: Path,
        project: str,
        run_path: str,
        *,
        histograms: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage_root = storage_root
        self.project = project
        self.run_path = run_path
        self.histograms = histograms  # also report histograms (a rule asks for them)
        self.clock = clock
        self.files: dict[str, _File] = {}  # path inside the run -> progress
        self.listings: dict[str, _Listing] = {}  # directory inside the run ('' or 'x/')
        self.plugins: dict[str, str] = {}  # curve -> plugin of its TF2 tensors
        self.logged = LoggedParams()  # what the training code wrote of hparams and metrics
        self._own_file = False  # the file being parsed is tbhub's hparams file
        # Subdirectory -> decode_simple's memo of one-value summaries and their curve names.
        self._names: dict[str, dict[bytes, str]] = {}
        self._parts: list[str] | None = None  # the run's path, checked and split once

    def read(self, budget: int, *, project_fd: int | None = None) -> Reading:
        """What the run's event files gained since the last call, reading at most `budget`
        bytes. A run that is gone, or behind a symlink, reads as nothing. `project_fd`: the
        project's directory, already opened (and checked) by storage/paths.open_project for
        many runs at once."""
        reading = Reading()
        try:
            if project_fd is None:
                with opened_run(self.storage_root, self.project, self.run_path) as fd:
                    self._read_dir(reading, fd, "", MAX_DEPTH, budget, MAX_FILES)
            else:
                if self._parts is None:
                    self._parts = split_relative(self.run_path)
                fd = open_below(project_fd, self._parts)
                try:
                    self._read_dir(reading, fd, "", MAX_DEPTH, budget, MAX_FILES)
                finally:
                    os.close(fd)
        except UnsafePath:  # a symlink where the run should be: never followed
            pass
        except OSError as exc:
            if exc.errno not in GONE:
                raise
        logged = self.logged
        if logged.metric_curves and reading.scalars:
            logged.scalars(reading.scalars)
        if logged.changed:
            logged.changed = False
            reading.params = logged.merged()
        return reading

    def _read_dir(
        self, reading: Reading, fd: int, prefix: str, depth: int, budget: int, files: int
    ) -> int:
        """Read the event files of the directory `fd` (the run, or `prefix` in it) by name,
        its files before its subdirectories, at most `files` of them; how many are left. A
        directory whose inode and mtime are what they were when it was listed (long enough
        after that mtime, and lately) is not listed again: with thousands of runs each read
        every second, the listing was a third of the cost."""
        st = os.fstat(fd)
        listing = self.listings.get(prefix)
        if (
            listing is None
            or not listing.trusted
            or listing.mtime_ns != st.st_mtime_ns
            or listing.inode != st.st_ino
            or self.clock() - listing.listed_at >= RELIST_SECONDS
        ):
            listing = self.listings[prefix] = _list(fd, st, self.clock())
        for name in listing.files:
            try:
                file_st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(file_st.st_mode):
                continue
            if files <= 0:
                return 0
            if reading.bytes_read >= budget:
                reading.behind = True
                return 0
            files -= 1
            self._read_file(reading, prefix + name, fd, name, file_st, budget)
        if depth <= 0:
            return files
        for name in listing.subdirs:
            if files <= 0:
                return 0
            try:
                child = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:  # gone, or swapped for a symlink
                continue
            try:
                files = self._read_dir(reading, child, f"{prefix}{name}/", depth - 1, budget,
                                       files)  # fmt: skip
            finally:
                os.close(child)
        return files

    def _start_over(self, reading: Reading) -> None:
        self.files.clear()
        self.plugins.clear()
        self.logged = LoggedParams()
        reading.scalars.clear()
        reading.histograms.clear()
        reading.reset = True

    def _read_file(
        self, reading: Reading, path: str, dir_fd: int, name: str, st: os.stat_result, budget: int
    ) -> None:
        state = self.files.get(path)
        if state is not None and (st.st_size < state.offset or st.st_ino != state.inode):
            # Rewritten or truncated: its records are mixed into what was read, start over
            # (the files already read this call are read again on the next).
            self._start_over(reading)
            state = None
        if state is None:
            state = self.files[path] = _File(inode=st.st_ino)
        changed = (st.st_size, st.st_mtime_ns) != (state.size, state.mtime_ns)
        state.size, state.mtime_ns = st.st_size, st.st_mtime_ns
        if state.offset >= st.st_size:
            return
        if (
            state.bad_at is not None
            and not changed
            and self.clock() - state.tried_at < RETRY_SECONDS
        ):
            return  # the bad frame is what it was: retried later
        try:
            fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
        except OSError:
            return
        prefix = path[: -len(name)]  # the subdirectory (train/, validation/ ...) names the curve
        try:
            want = min(budget - reading.bytes_read, st.st_size - state.offset)
            data = os.pread(fd, want, state.offset)
            self._own_file = path == OWN_HPARAMS_FILE
            used = self._parse(reading, prefix, data, state)
            if used == 0 and state.bad_at is None and want < st.st_size - state.offset:
                # One frame longer than what the budget left: read it whole all the same.
                data = _whole_frame(fd, state.offset)
                used = self._parse(reading, prefix, data, state)
        finally:
            self._own_file = False
            os.close(fd)
        reading.bytes_read += len(data)
        state.offset += used
        if state.offset < st.st_size and state.bad_at is None:
            reading.behind = reading.behind or len(data) < st.st_size - state.offset + used

    def _parse(self, reading: Reading, prefix: str, data: bytes, state: _File) -> int:
        """Read the whole frames at the start of `data`; the bytes they take. Each frame is
        checked (storage/frame_check.py) and decoded in turn: the commonest record, one simple
        value, by `decode_simple`, any other of the common shape by `decode_other`, the rest
        by the protobuf classes."""
        pos = 0
        size = len(data)
        scalars = reading.scalars
        names = self._names.get(prefix)
        if names is None or len(names) > MAX_TAGS:
            names = self._names[prefix] = {}
        while True:
            end = frame_at(data, pos)
            if end == TORN:
                return pos
            if end == BAD_LENGTH:  # where the frame ends is unknown: it waits
                self._bad_frame(state, state.offset + pos, skippable=False)
                return pos
            if end == BAD_DATA:
                end = pos + HEADER_BYTES + _LENGTH(data, pos)[0]
                if not self._bad_frame(state, state.offset + pos, skippable=end + 4 < size):
                    return pos
                pos = end + 4  # a frame that stayed bad: skipped, and the rest read
                continue
            body = pos + HEADER_BYTES
            simple = decode_simple(data, body, end, names, prefix)
            if simple is not None:
                scalars.append(_make_point(ScalarPoint, simple))
            elif not self._other(reading, prefix, data, body, end):
                if not self._bad_frame(state, state.offset + pos, skippable=end + 4 < size):
                    return pos
                pos = end + 4  # a frame that stayed bad: skipped, and the rest read
                continue
            state.bad_at = None
            pos = end + 4

    def _other(self, reading: Reading, prefix: str, data: bytes, body: int, end: int) -> bool:
        """A record other than one simple value; False when protobuf cannot parse it."""
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto.event_pb2 import Event

        decoded = decode_other(data, body, end)
        if decoded is None or not self._decoded(reading, prefix, decoded):
            try:  # not the common shape: the protobuf classes read it
                event = Event.FromString(data[body:end])
            except DecodeError:
                return False
            if event.HasField("summary"):
                self._values(reading, prefix, event)
        return True

    def _bad_frame(self, state: _File, offset: int, *, skippable: bool) -> bool:
        """Note a frame that failed its checks; True when it is time to skip it."""
        now = self.clock()
        if state.bad_at != offset:
            state.bad_at, state.bad_since = offset, now
        state.tried_at = now
        if skippable and now - state.bad_since >= SKIP_AFTER_SECONDS:
            state.bad_at = None
            return True
        return False

    def _plugin(self, curve: str, name: str) -> str:
        """The plugin of a curve's TF2 tensors: named in the metadata of its first value."""
        if name:
            self.plugins[curve] = name
            return name
        return self.plugins.get(curve, "")

    def _decoded(self, reading: Reading, prefix: str, decoded: Decoded) -> bool:
        """Add what storage/event_decode.py read of a record; False (nothing added) when a
        value needs the protobuf parse: a scalar tensor of another layout, or a histogram
        tensor while histograms are asked for."""
        wall_time, step, values = decoded
        if not values:
            return True
        points = []
        for tag, plugin, number in values:
            curve = prefix + tag
            if plugin is not None:  # a tensor
                plugin = self._plugin(curve, plugin)
                if plugin == HISTOGRAMS_PLUGIN and self.histograms:
                    return False
                if plugin != SCALARS_PLUGIN:
                    continue
                if number is None:
                    return False
            points.append(_make_point(ScalarPoint, (curve, step, wall_time, number)))
        reading.scalars += points
        return True

    def _values(self, reading: Reading, prefix: str, event: Any) -> None:
        step, wall_time = event.step, event.wall_time  # an int and a float already
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if kind == "simple_value":  # the hot path: made without the NamedTuple's __new__
                point = (prefix + value.tag, step, wall_time, value.simple_value)
                reading.scalars.append(_make_point(ScalarPoint, point))
            elif kind == "tensor":
                curve = prefix + value.tag
                plugin = self._plugin(curve, value.metadata.plugin_data.plugin_name)
                if plugin == SCALARS_PLUGIN:
                    number = _tensor_scalar(value.tensor)
                    if number is not None:
                        reading.scalars.append(ScalarPoint(curve, step, wall_time, number))
                elif plugin == HISTOGRAMS_PLUGIN and self.histograms:
                    finite = _tensor_finite(value.tensor)
                    reading.histograms.append(HistogramPoint(curve, step, wall_time, finite))
                elif plugin == TEXT_PLUGIN and value.tag in ARGS_TAGS and not self._own_file:
                    self.logged.args_text(value.tensor.string_val)
                elif plugin == HPARAMS_PLUGIN and not self._own_file:
                    self.logged.plugin_data(prefix, value.metadata.plugin_data.content)
            elif kind == "histo" and self.histograms:
                finite = _histo_finite(value.histo)
                reading.histograms.append(
                    HistogramPoint(prefix + value.tag, step, wall_time, finite)
                )
            elif (
                kind is None
                and value.metadata.plugin_data.plugin_name == HPARAMS_PLUGIN
                and not self._own_file
            ):  # torch, tensorboardX and Lightning write them with no value
                self.logged.plugin_data(prefix, value.metadata.plugin_data.content)


def read_scalars(path: Path, *, chunk: int = 16 << 20) -> list[ScalarPoint]:
    """Every scalar of one event file, start to end, as a follower reads it (tools and the
    reader benchmark)."""
    follower = RunFollower(path.parent, "", "")
    reading, state = Reading(), _File()
    with open(path, "rb") as fh:
        while data := os.pread(fh.fileno(), chunk, state.offset):
            used = follower._parse(reading, "", data, state)
            if used == 0:
                used = follower._parse(reading, "", _whole_frame(fh.fileno(), state.offset), state)
                if used == 0:
                    break
            state.offset += used
    return reading.scalars


def _whole_frame(fd: int, offset: int) -> bytes:
    """The frame at `offset` whole, however long (a budget never leaves a file stuck)."""
    header = os.pread(fd, HEADER_BYTES, offset)
    if len(header) < HEADER_BYTES:
        return b""
    length, length_crc = HEADER.unpack(header)
    if masked(header[:8]) != length_crc:
        return b""
    return os.pread(fd, length + RECORD_OVERHEAD, offset)
