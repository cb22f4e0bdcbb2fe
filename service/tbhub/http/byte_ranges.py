"""One byte range of a download (RFC 9110 section 14): `Range: bytes=first-last`, `first-`
or `-suffix`, and the `If-Range` check that keeps a resumed download from splicing two
versions of a file. Anything else (other units, several ranges, a malformed or over-long
header, a stale If-Range) is ignored, so the whole file is sent, as the RFC allows."""

from __future__ import annotations

import re
from dataclasses import dataclass

RANGE_HEADER_MAX = 100
_SINGLE = re.compile(r"bytes=(\d{0,19})-(\d{0,19})", re.IGNORECASE)


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # inclusive

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


class Unsatisfiable(Exception):
    """A well-formed range that starts at or past the end of the file: 416."""


def pick_range(header: str | None, size: int) -> ByteRange | None:
    """The range to send, None for the whole file, Unsatisfiable for 416."""
    if header is None or len(header) > RANGE_HEADER_MAX:
        return None
    match = _SINGLE.fullmatch(header.strip().replace(" ", ""))
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":  # the last `last` bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise Unsatisfiable
        return ByteRange(max(size - suffix, 0), size - 1)
    start = int(first)
    end = int(last) if last else None
    if end is not None and end < start:  # invalid, so ignored (section 14.1.1)
        return None
    if start >= size:
        raise Unsatisfiable
    return ByteRange(start, size - 1 if end is None else min(end, size - 1))


def if_range_holds(if_range: str | None, *, etag: str, last_modified: str) -> bool:
    """No If-Range, or one naming this very version (a strong ETag, or the exact date)."""
    if if_range is None:
        return True
    value = if_range.strip()
    if value.startswith(("W/", '"')):
        return value == etag
    return value == last_modified
