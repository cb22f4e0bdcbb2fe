"""TFRecord framing, as event files use it: where whole records end. Standard library only,
because the uploader (client/upload.py) cuts its chunks with it and the server
(storage/event_upload.py) holds a torn record back with it.

    u64 length | u32 masked CRC-32C of the length | data | u32 masked CRC-32C of the data

Walking the lengths is enough to find record ends; the one header a walk stops at (a record
not yet whole) has its CRC checked, so bytes that are not TFRecord framing are never taken
for the start of a record that never ends.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator

HEADER = struct.Struct("<QI")  # length, masked CRC-32C of the length bytes
HEADER_BYTES = HEADER.size  # 12
RECORD_OVERHEAD = HEADER_BYTES + 4  # the header and the data's CRC around each record
_LENGTH = struct.Struct("<Q")
Data = bytes | bytearray | memoryview | mmap.mmap


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of `data`."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record_length(header: bytes) -> int | None:
    """The data length a whole 12-byte header declares; None when its CRC does not match."""
    length, crc = HEADER.unpack(header)
    return length if masked_crc32c(header[:8]) == crc else None


def framed(record: bytes) -> bytes:
    """One record as a writer frames it (tests and tools write event files with it)."""
    length = _LENGTH.pack(len(record))
    return (
        length
        + struct.pack("<I", masked_crc32c(length))
        + record
        + struct.pack("<I", masked_crc32c(record))
    )


def whole_records_end(data: Data, start: int = 0, size: int | None = None) -> int:
    """Where the whole records from `start` (a record boundary) end in data[:size]: `start`
    when not even one is whole. Bytes whose framing is broken (a header with a bad CRC where
    the walk stops) end at `size`: nothing would ever make them whole, so none is held back."""
    size = len(data) if size is None else size
    pos = start
    unpack = _LENGTH.unpack_from
    while pos + HEADER_BYTES <= size:
        nxt = pos + unpack(data, pos)[0] + RECORD_OVERHEAD
        if nxt > size:
            if record_length(bytes(data[pos : pos + HEADER_BYTES])) is None:
                return size
            break
        pos = nxt
    return pos


def chunk_ends(data: Data, start: int, end: int, limit: int) -> Iterator[int]:
    """Where to cut data[start:end] into chunks of at most `limit` bytes, each ending where a
    record ends. Only a record longer than `limit` (or the unfinished record at `end`, or
    bytes that are not framing) is cut inside; the server holds such pieces back until the
    record is whole."""
    pos = start
    while pos < end:
        cut = whole_records_end(data, pos, min(end, pos + limit))
        if cut == pos:
            cut = min(end, pos + limit)
        yield cut
        pos = cut
