"""Exclusive, non-blocking file locks that name the PID holding them."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class LockHeld(Exception):
    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def hold_lock(path: Path) -> IO[str]:
    """Take the lock at `path` and write our PID into it; the lock lasts while the returned
    handle is open. Raises LockHeld with the holder's PID when another process has it."""
    handle = open(path, "a+")  # noqa: SIM115 - the caller owns the handle's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        handle.close()
        raise LockHeld(holder) from None
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()
    return handle
