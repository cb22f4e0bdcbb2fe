"""Which TFRecord frames of a read are whole and sound (storage/event_reader.py reads them):
where the frames end by their lengths, and whose length or data fails its masked CRC-32C.

The CRC is google-crc32c's compiled one (a dependency of tbhub): a Python loop per byte
cost the reader most of its time.
"""

from __future__ import annotations

import struct

from google_crc32c import value as crc32c  # type: ignore[import-not-found]

from tbhub.storage.tfrecord import HEADER_BYTES, RECORD_OVERHEAD

_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_MASK_DELTA = 0xA282EAD8


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
    crc = _CRC.unpack_from
    for index, (start, length) in enumerate(frames):
        end = start + HEADER_BYTES + length
        # masked() written out: two calls a record were a tenth of the monitor's reading.
        head, body = crc32c(data[start : start + 8]), crc32c(data[start + HEADER_BYTES : end])
        if (((head >> 15) | (head << 17)) + _MASK_DELTA) & 0xFFFFFFFF != crc(data, start + 8)[0]:
            return index
        if (((body >> 15) | (body << 17)) + _MASK_DELTA) & 0xFFFFFFFF != crc(data, end)[0]:
            return index
    return None


def masked(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
