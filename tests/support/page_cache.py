"""How much of a file the page cache holds (mincore(2) over a mapping that touches none of
it): a write through O_DIRECT leaves none of its pages cached, a buffered one all of them."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]  # fmt: skip
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def cached_pages(path: Path) -> list[bool]:
    """For each page of `path`, whether the page cache holds it."""
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    if not pages:
        return []
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap")
        try:
            vector = ctypes.create_string_buffer(pages)
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
            return [bool(byte & 1) for byte in vector.raw]
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)
