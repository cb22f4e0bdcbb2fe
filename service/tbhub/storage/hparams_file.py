"""The run's hyperparameters and final metrics as TensorBoard's HPARAMS tab reads them.

tbhub owns one event file per run, `events.out.tfevents.0.tbhub-hparams`, beside what the
job writes. Its first record is a file-version event whose `source_metadata.writer` is
"tbhub" (how tbhub knows the file as its own: a file of that name it did not write is never
touched); the second holds the hparams plugin's session-start summary (TensorBoard's own
builder, `plugins.hparams.summary_v2.hparams_pb`, with the run's path as its trial id so
each run is a session group of its own); then each final metric as a scalar
under `final/<name>` (the prefix keeps it apart from a curve of the same name the job logs).

No experiment summary is written: TensorBoard would take one run's experiment for the whole
project, and without one it lists every run that has a session start, with the scalars of
each as its metrics. A change of metrics only appends (a board reading the file sees the new
values at once); a change of hyperparameters writes the file anew, through a temporary file
renamed over it, which a board that already read the run shows after its next restart
(TensorBoard keeps the first session-start it read for a run).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbhub.storage.run_files import opened_run
from tbhub.storage.tfrecord import HEADER_BYTES, RECORD_OVERHEAD, framed, record_length

FILE_NAME = "events.out.tfevents.0.tbhub-hparams"
WRITER = "tbhub"
METRIC_PREFIX = "final/"
MAX_BYTES = 1 << 20  # a longer file of that name is not one tbhub wrote
NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class NotOurs(Exception):
    """A file of tbhub's name is there that tbhub did not write: it is left alone."""


@dataclass(frozen=True)
class _Existing:
    data: bytes
    last: dict[str, float]  # metric tag -> the value written last
    next_step: int


def _event(**fields: Any) -> Any:
    from tensorboard.compat.proto.event_pb2 import Event

    return Event(**fields)


def _hparam_value(value: Any) -> bool | float | str:
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return float(value)
    return json.dumps(value, sort_keys=True)  # None, or anything a later API accepts


def header_bytes(hparams: Mapping[str, Any], *, trial: str, started: float) -> bytes:
    """The file-version record and the session start, framed; the same bytes for the same
    hyperparameters and start, so a look at the file tells whether they changed."""
    from tensorboard.compat.proto.event_pb2 import SourceMetadata
    from tensorboard.plugins.hparams.summary_v2 import hparams_pb

    version = _event(wall_time=started, file_version="brain.Event:2",
                     source_metadata=SourceMetadata(writer=WRITER))  # fmt: skip
    values = {key: _hparam_value(value) for key, value in sorted(hparams.items())}
    start = _event(wall_time=started, step=0,
                   summary=hparams_pb(values, trial_id=trial, start_time_secs=started))  # fmt: skip
    return framed(version.SerializeToString()) + framed(start.SerializeToString())


def metric_bytes(metrics: Mapping[str, float], *, step: int, at: float) -> bytes:
    from tensorboard.compat.proto.summary_pb2 import Summary

    out = b""
    for key, value in sorted(metrics.items()):
        summary = Summary(value=[Summary.Value(tag=METRIC_PREFIX + key, simple_value=value)])
        out += framed(_event(wall_time=at, step=step, summary=summary).SerializeToString())
    return out


def _records(data: bytes) -> list[bytes]:
    records, pos = [], 0
    while pos + HEADER_BYTES <= len(data):
        length = record_length(data[pos : pos + HEADER_BYTES])
        if length is None or pos + length + RECORD_OVERHEAD > len(data):
            break
        records.append(data[pos + HEADER_BYTES : pos + HEADER_BYTES + length])
        pos += length + RECORD_OVERHEAD
    return records


def _read_own(dir_fd: int) -> _Existing | None:
    try:
        fd = os.open(FILE_NAME, os.O_RDONLY | NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symlink or a directory in its place
        raise NotOurs(f"{FILE_NAME} is not a plain file") from exc
    try:
        data = os.pread(fd, MAX_BYTES + 1, 0)
    finally:
        os.close(fd)
    from tensorboard.compat.proto.event_pb2 import Event

    records = _records(data)
    first = Event.FromString(records[0]) if records and len(data) <= MAX_BYTES else None
    if first is None or first.source_metadata.writer != WRITER:
        raise NotOurs(f"a file named {FILE_NAME} that tbhub did not write is in the way")
    last: dict[str, float] = {}
    step = 0
    for record in records[2:]:
        event = Event.FromString(record)
        step = max(step, event.step + 1)
        for value in event.summary.value:
            last[value.tag] = value.simple_value
    return _Existing(data, last, step)


def write_hparams_file(
    storage_root: Path,
    project: str,
    run_path: str,
    *,
    hparams: Mapping[str, Any],
    metrics: Mapping[str, float],
    started: float,
    now: float,
) -> bool:
    """Make the run's hparams file say `hparams` and `metrics`; False when there was nothing
    to write. OSError (the directory is gone or not writable), UnsafePath or NotOurs when it
    cannot; the file is then as it was."""
    with opened_run(storage_root, project, run_path) as dir_fd:
        existing = _read_own(dir_fd)
        if existing is None and not hparams and not metrics:
            return False
        header = header_bytes(hparams, trial=run_path, started=started)
        if existing is not None and existing.data.startswith(header):
            changed = {k: v for k, v in metrics.items()
                       if existing.last.get(METRIC_PREFIX + k) != _as_float32(v)}  # fmt: skip
            if not changed:
                return False
            _append(dir_fd, metric_bytes(changed, step=existing.next_step, at=now))
            return True
        _replace(dir_fd, header + metric_bytes(metrics, step=0, at=now))
        return True


def _as_float32(value: float) -> float:
    """What a scalar summary keeps of `value` (simple_value is a 32-bit float)."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    return float(Summary.Value(simple_value=value).simple_value)


def _append(dir_fd: int, data: bytes) -> None:
    fd = os.open(FILE_NAME, os.O_WRONLY | os.O_APPEND | NOFOLLOW, dir_fd=dir_fd)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace(dir_fd: int, data: bytes) -> None:
    # The temporary name holds no "tfevents": TensorBoard never reads it.
    temp = f".tbhub-hparams.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o644, dir_fd=dir_fd)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, FILE_NAME, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
