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
    """Whether the frame's length header passes its CRC."""
    return _sound_length(data[start : start + HEADER_BYTES]) is not None


def _sound_length(header: bytes) -> int | None:
    """The length a whole header (a length and its CRC) gives, or None when it fails its CRC.
    A writer writes the same few lengths over and over: a header that passed is remembered
    (a look-up costs a third of a CRC and its masking)."""
    length = _SOUND_HEADERS.get(header)
    if length is not None:
        return length
    if masked(header[:8]) != _CRC.unpack_from(header, 8)[0]:
        return None
    if len(_SOUND_HEADERS) >= MAX_SOUND_HEADERS:
        _SOUND_HEADERS.clear()
    length = _SOUND_HEADERS[header] = _LENGTH.unpack_from(header)[0]
    return length


_SOUND_HEADERS: dict[bytes, int] = {}  # length headers that passed their CRC -> the length
MAX_SOUND_HEADERS = 4096
TORN = -1  # frame_at: a frame cut short whose length passed its CRC (a writer still writing)
BAD_LENGTH = -2  # ... a length that fails its CRC, the frame whole or not
BAD_DATA = -3  # ... a whole frame whose data fails its CRC


def frame_at(data: bytes, pos: int) -> int:
    """Where the data of the frame at `pos` ends when the frame is whole and both its CRCs
    pass (it starts at pos + HEADER_BYTES); otherwise TORN, BAD_LENGTH or BAD_DATA. One call
    per record: the reader's loop is the monitor's hottest code."""
    header = data[pos : pos + HEADER_BYTES]
    length = _SOUND_HEADERS.get(header)
    if length is None:
        if len(header) < HEADER_BYTES:
            return TORN
        length = _sound_length(header)
        if length is None:
            return BAD_LENGTH
    end = pos + HEADER_BYTES + length
    if end + 4 > len(data):
        return TORN
    # masked() written out: a call per record was a tenth of the monitor's reading.
    crc = crc32c(data[pos + HEADER_BYTES : end])
    if (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF != _CRC.unpack_from(data, end)[0]:
        return BAD_DATA
    return end


def masked(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF
