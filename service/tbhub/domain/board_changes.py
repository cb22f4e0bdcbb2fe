"""Readers waiting for boards' states to change: the starting page's long-poll
(api/board_state.py). The supervisor calls `notify()` from its thread the moment a pass has
written a change to what it observed; waiters are asyncio tasks of the control plane, woken
on their own event loop. On a standby replica the supervisor runs on the leader, so nothing
here wakes: waiters read the database again every `RECHECK_SECONDS` instead.

Each notify() moves a generation on. A waiter reads the generation before it reads the board
and waits `since` it: a change written while it read (after the read began, before it
waited) ends its wait at once. Without it that wake-up was lost, and the waiter saw the
board ready only at its next recheck, RECHECK_SECONDS late."""

from __future__ import annotations

import asyncio
import threading

# How often a waiter reads the board's state again without a wake-up (a standby replica).
RECHECK_SECONDS = 0.5


class BoardChanges:
    """Wake-ups from any thread for waiters on any event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._generation = 0

    @property
    def generation(self) -> int:
        """How many changes have been notified: read it before reading a board, and wait
        `since` it."""
        with self._lock:
            return self._generation

    def notify(self) -> None:
        """Some board's observed state changed: wake every waiter."""
        with self._lock:
            self._generation += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed; its waiter is gone
                continue

    async def wait(self, timeout: float, *, since: int) -> bool:
        """Until a notify() after generation `since` (True: at once if one came already) or
        `timeout` seconds (False)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if self._generation != since:
                return True
            self._waiters.add(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter[1].wait()
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiters)
