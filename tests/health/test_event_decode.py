"""The decoder of the common record shape (storage/event_decode.py) gives exactly what the
protobuf parse gives, on the records real writers make (torch's SummaryWriter, tensorboardX,
TensorBoard's own TF2-style writer) and on hand-made edge cases; whatever it declines, the
follower reads through the protobuf classes, so a file of every kind of record reads the
same scalars, steps and wall times as TensorBoard's loader."""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import HistogramProto, Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

import tbhub.storage.event_decode as event_decode
from tbhub.storage.event_decode import decode_event, decode_simple
from tbhub.storage.event_reader import _tensor_scalar, read_scalars
from tbhub.storage.frame_check import frames
from tbhub.storage.tfrecord import HEADER_BYTES
from tests.health.writers import SYNTHETIC_WRITERS, RunSpec, Written, write_runs


@pytest.fixture(scope="module")
def writer_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One event file per synthetic writer, a NaN and an infinity in each."""
    root = tmp_path_factory.mktemp("writers")
    specs = {
        f"{writer}-{kind}": RunSpec(f"{writer}-{kind}", writer, kind, steps=80, seed=21)
        for writer in SYNTHETIC_WRITERS
        for kind in ("nan", "healthy")
    }
    written: dict[Path, Written] = write_runs({root / name: spec for name, spec in specs.items()})
    return {w.name: next(w.run_dir.rglob("events.out.tfevents.*")) for w in written.values()}


def records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    found, _ = frames(data, 0)
    return [data[start + HEADER_BYTES : start + HEADER_BYTES + length] for start, length in found]


def by_protobuf(record: bytes) -> tuple[float, int, list[tuple[str, str | None, str]] | None]:
    """What the decoder should give, read through the protobuf classes; numbers by repr (NaN
    is not equal to itself, and the bits must match, not just the value)."""
    event = Event.FromString(record)
    if not event.HasField("summary"):
        return event.wall_time, event.step, None
    values: list[tuple[str, str | None, str]] = []
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            values.append((value.tag, None, repr(value.simple_value)))
        elif kind == "tensor":
            number = _tensor_scalar(value.tensor)
            plugin = value.metadata.plugin_data.plugin_name
            values.append((value.tag, plugin, repr(number)))
    return event.wall_time, event.step, values


def as_compared(record: bytes) -> tuple[float, int, list[tuple[str, str | None, str]] | None]:
    decoded = decode_event(record, 0, len(record))
    assert decoded is not None
    wall_time, step, values = decoded
    shown = None if values is None else [(t, p, repr(n)) for t, p, n in values]
    return wall_time, step, shown


def test_records_of_real_writers_decode_as_protobuf_parses_them(
    writer_files: dict[str, Path],
) -> None:
    for name, path in writer_files.items():
        summaries = [r for r in records(path) if Event.FromString(r).HasField("summary")]
        assert len(summaries) > 100, name
        for record in summaries:
            assert as_compared(record) == by_protobuf(record), name


def test_real_writers_values_are_all_numbers_the_fast_path_reads(
    writer_files: dict[str, Path],
) -> None:
    """No scalar of these writers needs the protobuf parse (the tensor layouts are known)."""
    for name, path in writer_files.items():
        for record in records(path):
            decoded = decode_event(record, 0, len(record))
            if decoded is not None and decoded[2]:
                assert all(number is not None for _, _, number in decoded[2]), name
        nan = [p for p in read_scalars(path) if not math.isfinite(p.value)]
        assert bool(nan) == name.endswith("-nan"), name


def tensor_value(tag: str, tensor: TensorProto, plugin: str = "") -> Summary.Value:
    value = Summary.Value(tag=tag, tensor=tensor)
    if plugin:
        value.metadata.plugin_data.plugin_name = plugin
        value.metadata.data_class = 1
        value.metadata.display_name = tag
    return value


def edge_events() -> list[Event]:
    array = tensor_util.make_tensor_proto
    histo_tensor = array(np.array([[0.0, 1.0, 3.0], [1.0, 2.0, 4.0]]), dtype=np.float64)
    return [
        Event(step=0, wall_time=0.0, summary=Summary(value=[Summary.Value(tag="zero")])),
        Event(step=-5, wall_time=-1.5, summary=Summary(value=[Summary.Value(tag="neg")])),
        Event(step=2**63 - 1, summary=Summary(value=[Summary.Value(tag="m", simple_value=0)])),
        Event(step=-(2**63), summary=Summary(value=[Summary.Value(tag="m", simple_value=1)])),
        Event(
            step=7,
            wall_time=1.7e9,
            summary=Summary(
                value=[
                    Summary.Value(tag="a" * 300, simple_value=float("nan")),
                    Summary.Value(tag="ünïcode/loss", simple_value=float("-inf")),
                    Summary.Value(tag="tiny", simple_value=1e-45),
                ]
            ),
        ),
        Event(step=3, summary=Summary(value=[tensor_value("f", array(1.25), "scalars")])),
        Event(step=3, summary=Summary(value=[tensor_value("f", array(np.float64(2.5)))])),
        Event(
            step=3,
            summary=Summary(
                value=[
                    tensor_value(
                        "d", TensorProto(dtype=2, tensor_content=struct.pack("<d", 0.1)), "scalars"
                    )
                ]
            ),
        ),
        Event(
            step=3,
            summary=Summary(
                value=[
                    tensor_value(
                        "c", TensorProto(dtype=1, tensor_content=struct.pack("<f", math.inf))
                    )
                ]
            ),
        ),
        Event(
            step=3,
            summary=Summary(
                value=[tensor_value("dv", TensorProto(dtype=2, double_val=[3.5]), "scalars")]
            ),
        ),
        Event(step=3, summary=Summary(value=[tensor_value("h", histo_tensor, "histograms")])),
        Event(step=4, summary=Summary()),
    ]


def declined_events() -> list[Event]:
    """Records the decoder leaves to the protobuf parse."""
    array = tensor_util.make_tensor_proto
    return [
        Event(wall_time=1.0, file_version="brain.Event:2"),
        Event(
            step=1,
            summary=Summary(
                value=[
                    Summary.Value(
                        tag="w",
                        histo=HistogramProto(min=0, max=1, num=2, bucket_limit=[1], bucket=[2]),
                    )
                ]
            ),
        ),
        Event(step=1, summary=Summary(value=[tensor_value("i", array(np.int32(3)), "scalars")])),
        Event(step=1, summary=Summary(value=[tensor_value("t", array("text"), "text")])),
        Event(
            step=1, summary=Summary(value=[Summary.Value(tag="n", node_name="x", simple_value=1)])
        ),
    ]


@pytest.mark.parametrize("event", edge_events(), ids=lambda e: str(e.step))
def test_edge_records_decode_as_protobuf_parses_them(event: Event) -> None:
    record = event.SerializeToString()
    assert as_compared(record) == by_protobuf(record)


@pytest.mark.parametrize("event", declined_events(), ids=lambda e: str(e.step))
def test_other_records_are_declined(event: Event) -> None:
    record = event.SerializeToString()
    assert decode_event(record, 0, len(record)) is None


def test_malformed_records_are_declined() -> None:
    record = Event(step=300, wall_time=2.0, summary=Summary(value=[
        Summary.Value(tag="loss", simple_value=0.5)])).SerializeToString()  # fmt: skip
    for cut in range(1, len(record)):  # a length or a varint running past the end
        try:
            parsed = by_protobuf(record[:cut])
        except DecodeError:
            assert decode_event(record, 0, cut) is None, cut
        else:  # cut between two fields: a whole (shorter) record
            assert as_compared(record[:cut]) == parsed, cut
    bad_utf8 = record.replace(b"loss", b"l\xffss")
    assert decode_event(bad_utf8, 0, len(bad_utf8)) is None
    merged = record + record  # two summaries: protobuf merges them
    assert decode_event(merged, 0, len(merged)) is None
    inside = b"junk" + record + b"junk"  # the record's bounds are respected
    assert as_compared(record) == as_compared_at(inside, 4, 4 + len(record))


def simple_events() -> list[Event]:
    """One simple value per record, the same tags at steps of every varint length."""
    steps = [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**40, 2**63 - 1, -1, -(2**63)]
    values = [0.5, float("nan"), float("inf"), -0.0, 1e-45]  # five
    return [
        Event(
            step=step,
            wall_time=1.7e9 + step % 1000,
            summary=Summary(value=[Summary.Value(tag=tag, simple_value=values[index % 5])]),
        )
        for index, step in enumerate(steps)
        for tag in ("loss", "train/grad_norm", "ü" * 40)
    ]


def test_records_whose_summary_was_met_before_decode_as_protobuf_parses_them(
    writer_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second time round every record is read at fixed places from the memo of summaries
    met (the pattern is then made to match nothing), and gives what protobuf gives."""
    every = [*(records(path) for path in writer_files.values()),
             [e.SerializeToString() for e in simple_events()]]  # fmt: skip
    memos: list[dict[bytes, str]] = [{} for _ in every]
    first = [[decode_simple(r, 0, len(r), memo, "run/") for r in rs]
             for rs, memo in zip(every, memos, strict=True)]  # fmt: skip
    assert any(memos[:-1]) and memos[-1]  # torch's writer and tensorboardX write them
    monkeypatch.setattr(event_decode, "_ONE_SIMPLE_VALUE", re.compile(rb"(?!)"))
    for rs, memo, decoded_first in zip(every, memos, first, strict=True):
        for record, before in zip(rs, decoded_first, strict=True):
            again = decode_simple(record, 0, len(record), memo, "run/")
            steps_read_at_fixed_places = Event.FromString(record).step in range(0, 2**14)
            if before is None or not steps_read_at_fixed_places:
                assert again is None
                continue
            assert again is not None and repr(again) == repr(before)
            tag, step, wall_time, number = again
            expected = by_protobuf(record)
            assert (wall_time, step, [("run/" + tag.removeprefix("run/"), None, repr(number))]
                    ) == (expected[0], expected[1], [("run/" + t, p, n)
                                                     for t, p, n in expected[2] or []])  # fmt: skip


def test_a_known_summary_after_other_fields_is_not_taken_for_one_simple_value() -> None:
    record = Event(step=5, wall_time=2.0, summary=Summary(value=[
        Summary.Value(tag="loss", simple_value=0.5)])).SerializeToString()  # fmt: skip
    memo: dict[bytes, str] = {}
    assert decode_simple(record, 0, len(record), memo) == ("loss", 5, 2.0, 0.5)
    for cut in range(1, len(record)):  # every cut, with the summary known
        decoded = decode_simple(record, 0, cut, memo)
        assert decoded is None or by_protobuf(record[:cut])[2] == [
            (decoded[0], None, repr(decoded[3]))], cut  # fmt: skip
    file_version = Event(step=5, wall_time=2.0, file_version="brain.Event:2").SerializeToString()
    assert decode_simple(file_version + record[9:], 0, len(file_version) + len(record) - 9,
                         memo) is None  # fmt: skip


def as_compared_at(data: bytes, start: int, end: int) -> object:
    decoded = decode_event(data, start, end)
    assert decoded is not None
    return decoded[0], decoded[1], [(t, p, repr(n)) for t, p, n in decoded[2] or []]


def test_a_file_of_every_kind_reads_what_tensorboards_loader_reads(tmp_path: Path) -> None:
    writer = EventFileWriter(str(tmp_path))
    for event in [*edge_events(), *declined_events()] * 2:
        writer.add_event(event)
    writer.close()
    [path] = tmp_path.glob("events.out.tfevents.*")
    expected = []
    plugins: dict[str, str] = {}
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            kind = value.WhichOneof("value")
            if value.metadata.plugin_data.plugin_name:
                plugins[value.tag] = value.metadata.plugin_data.plugin_name
            if kind == "simple_value":
                expected.append((value.tag, event.step, event.wall_time, repr(value.simple_value)))
            elif kind == "tensor" and plugins.get(value.tag) == "scalars":
                number = tensor_util.make_ndarray(value.tensor).item()
                expected.append((value.tag, event.step, event.wall_time, repr(float(number))))
    ours = [(p.tag, p.step, p.wall_time, repr(p.value)) for p in read_scalars(path)]
    assert ours == expected and len(ours) > 10
