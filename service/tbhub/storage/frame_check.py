"""Which TFRecord frames of a read are whole and sound (storage/event_reader.py reads them):
where the frames end by their lengths, and whose length or data fails its masked CRC-32C.

The CRC runs compiled when google-crc32c is installed. Otherwise many frames are checked
together, CRC-32C column by column in numpy across frames (a Python loop per byte is what
reading costs most), and a few frames in Python two bytes a step.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import cache
from typing import Any

from tbhub.storage.tfrecord import CRC_TABLE, HEADER_BYTES, RECORD_OVERHEAD

_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
BATCH_MIN = 32  # frames from which checking them together in numpy pays (measured: ~24)
BATCH_MAX = 16384  # frames checked together at most (memory: frames x BATCH_WIDTH bytes)
BATCH_WIDTH = 1024  # longer records are checked one by one


def frames(data: bytes, pos: int) -> tuple[list[tuple[int, int]], int | None]:
    """(start, data length) of each whole frame in data[pos:] by the lengths alone, and the
    start of a last, cut-short frame whose length header fails its CRC (None when it is a
    frame still being written, or there is none)."""
    frames: list[tuple[int, int]] = []
    size = len(data)
    unpack = _LENGTH.unpack_from
    while pos + HEADER_BYTES <= size:
        length = unpack(data, pos)[0]
        end = pos + length + RECORD_OVERHEAD
        if end > size:
            return frames, (pos if not header_ok(data, pos) else None)
        frames.append((pos, length))
        pos = end
    return frames, None


def header_ok(data: bytes, start: int) -> bool:
    length_crc = _CRC.unpack_from(data, start + 8)[0]
    return bool(masked(data[start : start + 8]) == length_crc)


def first_bad(data: bytes, frames: list[tuple[int, int]]) -> int | None:
    """The index of the first frame whose length or data fails its CRC; None if all pass."""
    if _C_CRC is None and len(frames) >= BATCH_MIN:
        return _first_bad_batched(data, frames)
    crc = _CRC.unpack_from
    for index, (start, length) in enumerate(frames):
        end = start + HEADER_BYTES + length
        if masked(data[start : start + 8]) != crc(data, start + 8)[0]:
            return index
        if masked(data[start + HEADER_BYTES : end]) != crc(data, end)[0]:
            return index
    return None


def _first_bad_batched(data: bytes, frames: list[tuple[int, int]]) -> int | None:
    """The same, many frames at a time: CRC-32C column by column in numpy across frames (the
    per-byte loop in Python is what reading costs most otherwise)."""
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8)
    for first in range(0, len(frames), BATCH_MAX):
        chunk = np.array(frames[first : first + BATCH_MAX], dtype=np.int64)
        starts, lengths = chunk[:, 0], chunk[:, 1]
        wanted_header = _stored_crcs(buf, starts + 8)
        wanted_data = _stored_crcs(buf, starts + HEADER_BYTES + lengths)
        bad = _masked_many(buf, starts, np.full(len(starts), 8)) != wanted_header
        short = lengths <= BATCH_WIDTH
        if short.any():
            bad[short] |= (
                _masked_many(buf, starts[short] + HEADER_BYTES, lengths[short])
                != (wanted_data[short])
            )
        for index in np.flatnonzero(~short):
            start, length = int(starts[index]), int(lengths[index])
            record = data[start + HEADER_BYTES : start + HEADER_BYTES + length]
            bad[index] |= masked(record) != int(wanted_data[index])
        if bad.any():
            return first + int(np.argmax(bad))
    return None


def _stored_crcs(buf: Any, at: Any) -> Any:
    import numpy as np

    bytes_ = buf[at[:, None] + np.arange(4)].astype(np.uint32)
    return bytes_[:, 0] | bytes_[:, 1] << 8 | bytes_[:, 2] << 16 | bytes_[:, 3] << 24


def _masked_many(buf: Any, starts: Any, lengths: Any) -> Any:
    import numpy as np

    width = int(lengths.max()) if len(lengths) else 0
    columns = np.arange(width)
    block = buf[np.minimum(starts[:, None] + columns, len(buf) - 1)]
    inside = columns < lengths[:, None]
    crc = np.full(len(starts), 0xFFFFFFFF, dtype=np.uint32)
    table = _np_table()
    for j in range(width):
        stepped = table[(crc ^ block[:, j]) & 0xFF] ^ (crc >> 8)
        crc = np.where(inside[:, j], stepped, crc)
    crc ^= np.uint32(0xFFFFFFFF)
    return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


@cache
def _np_table() -> Any:
    import numpy as np

    return np.array(CRC_TABLE, dtype=np.uint32)


def _c_crc() -> Callable[[bytes], int] | None:
    """A compiled CRC-32C when one is installed (google-crc32c): many times faster."""
    try:
        from google_crc32c import value  # type: ignore[import-not-found]
    except ImportError:
        return None
    return value  # type: ignore[no-any-return]


_C_CRC = _c_crc()


@cache
def _table16() -> list[int]:
    """CRC-32C two bytes at a step (half the Python loop of storage/tfrecord.py's)."""
    table = []
    for x in range(65536):
        low = CRC_TABLE[x & 0xFF] ^ (x >> 8)
        table.append(CRC_TABLE[low & 0xFF] ^ (low >> 8))
    return table


def masked(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`: compiled when installed, else in Python."""
    if _C_CRC is not None:
        crc = _C_CRC(data)
    else:
        table, crc = _table16(), 0xFFFFFFFF
        even = len(data) & ~1
        for word in memoryview(data)[:even].cast("H"):  # little-endian, as the bytes come
            crc = table[(crc ^ word) & 0xFFFF] ^ (crc >> 16)
        if even != len(data):
            crc = CRC_TABLE[(crc ^ data[-1]) & 0xFF] ^ (crc >> 8)
        crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
