"""A decoder for the common shape of an event record, read straight from the bytes: an Event
with a wall time, a step and a Summary whose values are `simple_value`s or tensors in one of
the layouts a scalar tensor has. storage/event_reader.py tries it on every record and parses
with the protobuf classes whatever it declines; that parse and then reading each field
through its Python wrappers cost the reader most of its time.

It gives exactly what the protobuf parse gives, or declines (None): any field it does not
know, a field twice where protobuf would merge, a string that is not UTF-8, a varint or a
length that runs past the record. Known fields of known types are decoded as protobuf does
(proto3: an absent number is 0, the last of a repeated scalar field wins, a step is a
signed 64-bit varint); wire types are those the descriptors give (event.proto,
summary.proto, tensor.proto, tensor_shape.proto in tensorboard/compat/proto).

    Event          1 wall_time double, 2 step int64, 5 summary Summary
    Summary        1 value Value (repeated)
    Summary.Value  1 tag string, 2 simple_value float, 8 tensor TensorProto,
                   9 metadata SummaryMetadata
    SummaryMetadata  1 plugin_data {1 plugin_name string, 2 content bytes},
                     2 display_name string, 3 summary_description string, 4 data_class enum
    TensorProto    1 dtype enum, 2 tensor_shape, 3 version_number int32, 4 tensor_content
                   bytes, 5 float_val float (packed), 6 double_val double (packed)
"""

from __future__ import annotations

import functools
import re
import struct

_DOUBLE = struct.Struct("<d").unpack_from
_FLOAT = struct.Struct("<f").unpack_from
DT_FLOAT, DT_DOUBLE = 1, 2  # TensorFlow's DataType numbers

# One value: (tag, plugin, number). plugin None: a simple_value, `number` is it. Otherwise a
# tensor: plugin is its metadata's plugin name ("" when it has none) and number its one
# number, or None when its layout is not one of the simple ones (the follower then asks the
# protobuf parse when it needs the number).
Value = tuple[str, str | None, float | None]
Decoded = tuple[float, int, list[Value] | None]  # wall time, step, values (None: no summary)


class _Decline(Exception):
    """Not the common shape: the protobuf parse reads this record."""


# The commonest record of all, one simple_value as torch and tensorboardX write it, matched in
# one go: wall_time, a step (absent when 0), then a summary of one value of a tag shorter
# than 128 bytes. The three lengths are checked against one another after the match.
_ONE_SIMPLE_VALUE = re.compile(
    rb"\x09(.{8})(?:\x10([\x80-\xff]{0,9}[\x00-\x7f]))?"
    rb"\x2a([\x00-\x7f])\x0a([\x00-\x7f])\x0a([\x00-\x7f])(.*)\x15(.{4})",
    re.DOTALL,
)


def decode_event(data: bytes, start: int, end: int) -> Decoded | None:
    """The Event in data[start:end] (wall time, step, summary values), or None when it is not
    the common shape."""
    simple = decode_simple(data, start, end, {})
    if simple is not None:
        tag, step, wall_time, number = simple
        return wall_time, step, [(tag, None, number)]
    return decode_other(data, start, end)


# One simple value: the name its caller gives the tag, step, wall time, value.
Simple = tuple[str, int, float, float]
SHORTEST_SIMPLE = 20  # wall time (9 bytes), the summary's three headers (6), 0x15 and 4 bytes


def decode_simple(
    data: bytes, start: int, end: int, names: dict[bytes, str], prefix: str = ""
) -> Simple | None:
    """The commonest record, one simple value (storage/event_reader.py calls this first on
    every record, then `decode_other`); None for any other record.

    `names` is the caller's memo: the bytes of each one-value summary met before (all of the
    record after its step but the value's 4 bytes) -> `prefix` + its tag. A record made of a
    wall time, a step of one or two bytes and one of those summaries is that summary with
    that step, wall time and value, read at fixed places; any other goes through the pattern
    (whose summary is then remembered)."""
    if end - start >= SHORTEST_SIMPLE and data[start] == 0x09:
        pos = start + 9
        step: int | None = 0
        if data[pos] == 0x10:
            low = data[pos + 1]
            if low < 0x80:
                step, pos = low, pos + 2
            elif data[pos + 2] < 0x80:
                step, pos = (low & 0x7F) | data[pos + 2] << 7, pos + 3
            else:
                step = None
        if step is not None:
            name = names.get(data[pos : end - 4])
            if name is not None:
                return name, step, _DOUBLE(data, start + 1)[0], _FLOAT(data, end - 4)[0]
    match = _ONE_SIMPLE_VALUE.fullmatch(data, start, end)
    if match is None:
        return None
    wall, varint, summary, value, size, tag, number = match.groups()
    if len(tag) != size[0] or size[0] != value[0] - 7 or value[0] != summary[0] - 2:
        return None
    try:
        name = prefix + _text(tag)
        step = 0 if varint is None else _step(varint)
    except (_Decline, UnicodeDecodeError):  # a step of more than 64 bits, a tag not UTF-8
        return None
    names[data[match.start(3) - 1 : end - 4]] = name
    return name, step, _DOUBLE(wall)[0], _FLOAT(number)[0]


def decode_other(data: bytes, start: int, end: int) -> Decoded | None:
    """Any record of the common shape walked field by field; None when it is not of it."""
    try:
        return _event(data, start, end)
    except (_Decline, IndexError, struct.error, UnicodeDecodeError):
        return None


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 10 bytes (64 bits) at `pos`: (value, position after)."""
    if pos >= end:
        raise _Decline
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift, limit = byte & 0x7F, 7, min(end, pos + 10)
    pos += 1
    while pos < limit:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> 64:
                raise _Decline
            return value, pos
        shift += 7
    raise _Decline


@functools.lru_cache(maxsize=4096)
def _text(tag: bytes) -> str:
    """A tag's text: a run writes the same few tags over and over (UnicodeDecodeError when
    it is not UTF-8; not cached)."""
    return tag.decode()


def _step(varint: bytes) -> int:
    """A step's varint, whole (the pattern above found where it ends), as a signed int64;
    the one- and two-byte steps most runs write are read without the general loop."""
    size = len(varint)
    if size == 1:
        return varint[0]
    if size == 2:
        return (varint[0] & 0x7F) | varint[1] << 7
    return _signed64(_varint(varint, 0, size)[0])


def _signed64(value: int) -> int:
    """An int64 field's varint value (two's complement in 64 bits) as protobuf reads it."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _length(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """A length-delimited field's data: (start, end), inside `end`."""
    size, pos = _varint(data, pos, end)
    if pos + size > end:
        raise _Decline
    return pos, pos + size


def _event(data: bytes, pos: int, end: int) -> Decoded:
    wall_time, step, values = 0.0, 0, None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x09:  # 1 wall_time, fixed64
            if pos + 8 > end:
                raise _Decline
            wall_time = _DOUBLE(data, pos)[0]
            pos += 8
        elif key == 0x10:  # 2 step, varint
            varint, pos = _varint(data, pos, end)
            step = _signed64(varint)
        elif key == 0x2A and values is None:  # 5 summary (a second one would be merged)
            first, pos = _length(data, pos, end)
            values = _summary(data, first, pos)
        else:
            raise _Decline
    return wall_time, step, values


def _summary(data: bytes, pos: int, end: int) -> list[Value]:
    values: list[Value] = []
    while pos < end:
        if data[pos] != 0x0A:  # 1 value, repeated
            raise _Decline
        first, pos = _length(data, pos + 1, end)
        value = _value(data, first, pos)
        if value is not None:
            values.append(value)
    return values


def _value(data: bytes, pos: int, end: int) -> Value | None:
    tag, kind, number, plugin = "", 0, None, None
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x0A:  # 1 tag
            first, pos = _length(data, pos, end)
            tag = _text(data[first:pos])
        elif key == 0x15 and kind != 8:  # 2 simple_value, fixed32 (the oneof's last wins)
            if pos + 4 > end:
                raise _Decline
            number, kind = _FLOAT(data, pos)[0], 2
            pos += 4
        elif key == 0x42 and kind == 0:  # 8 tensor
            first, pos = _length(data, pos, end)
            number, kind = _tensor_scalar(data, first, pos), 8
        elif key == 0x4A and plugin is None:  # 9 metadata (a second one would be merged)
            first, pos = _length(data, pos, end)
            plugin = _plugin_name(data, first, pos)
        else:
            raise _Decline
    if plugin == "hparams":  # hyperparameters (storage/logged_params.py): the protobuf parse
        raise _Decline
    if kind == 2:
        return tag, None, number
    if kind == 8:
        return tag, plugin or "", number
    return None  # no value of a kind the reader reads (protobuf's WhichOneof is None)


def _plugin_name(data: bytes, pos: int, end: int) -> str:
    name, seen = "", False
    while pos < end:
        key = data[pos]
        first, after = _length(data, pos + 1, end) if key in (0x0A, 0x12, 0x1A) else (0, 0)
        if key == 0x0A and not seen:  # 1 plugin_data
            name, seen = _plugin_data(data, first, after), True
        elif key in (0x12, 0x1A):  # 2 display_name, 3 summary_description
            data[first:after].decode()
        elif key == 0x20:  # 4 data_class, an enum
            _, after = _varint(data, pos + 1, end)
        else:
            raise _Decline
        pos = after
    return name


def _plugin_data(data: bytes, pos: int, end: int) -> str:
    name = ""
    while pos < end:
        key = data[pos]
        if key not in (0x0A, 0x12):  # 1 plugin_name, 2 content
            raise _Decline
        first, pos = _length(data, pos + 1, end)
        if key == 0x0A:
            name = data[first:pos].decode()
    return name


def _tensor_scalar(data: bytes, pos: int, end: int) -> float | None:
    """The one number of a TensorProto the way event_reader._tensor_scalar finds it (one
    float_val, one double_val, or 4 or 8 bytes of content of a float or double), None for
    any other layout of the fields below; declines any other field."""
    dtype, content, floats, doubles = 0, b"", b"", b""
    while pos < end:
        key = data[pos]
        pos += 1
        if key == 0x08:  # 1 dtype
            dtype, pos = _varint(data, pos, end)
        elif key == 0x12:  # 2 tensor_shape
            first, pos = _length(data, pos, end)
            _shape(data, first, pos)
        elif key == 0x18:  # 3 version_number
            _, pos = _varint(data, pos, end)
        elif key == 0x22:  # 4 tensor_content
            first, pos = _length(data, pos, end)
            content = data[first:pos]
        elif key == 0x2A:  # 5 float_val, packed (chunks add up)
            first, pos = _length(data, pos, end)
            floats += data[first:pos]
        elif key == 0x2D:  # 5 float_val, one unpacked
            floats += data[pos : pos + 4]
            pos += 4
        elif key == 0x32:  # 6 double_val, packed
            first, pos = _length(data, pos, end)
            doubles += data[first:pos]
        elif key == 0x31:  # 6 double_val, one unpacked
            doubles += data[pos : pos + 8]
            pos += 8
        else:
            raise _Decline
    if pos > end or len(floats) % 4 or len(doubles) % 8:
        raise _Decline
    if len(floats) == 4:
        return float(_FLOAT(floats)[0])
    if len(doubles) == 8:
        return float(_DOUBLE(doubles)[0])
    if dtype == DT_FLOAT and len(content) == 4:
        return float(_FLOAT(content)[0])
    if dtype == DT_DOUBLE and len(content) == 8:
        return float(_DOUBLE(content)[0])
    return None


def _shape(data: bytes, pos: int, end: int) -> None:
    """A TensorShapeProto, checked as protobuf would parse it (the number needs none of it)."""
    while pos < end:
        key = data[pos]
        if key == 0x12:  # 2 dim: {1 size int64, 2 name string}
            first, pos = _length(data, pos + 1, end)
            while first < pos:
                inner = data[first]
                if inner == 0x08:
                    _, first = _varint(data, first + 1, pos)
                elif inner == 0x12:
                    name, first = _length(data, first + 1, pos)
                    data[name:first].decode()
                else:
                    raise _Decline
        elif key == 0x18:  # 3 unknown_rank
            _, pos = _varint(data, pos + 1, end)
        else:
            raise _Decline
