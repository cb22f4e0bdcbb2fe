"""Readers waiting for boards' states to change: the starting page's long-poll
(api/board_state.py). The supervisor calls `notify()` from its thread the moment a pass has
written a change to what it observed; waiters are asyncio tasks of the control plane, woken
on their own event loop. On a standby replica the supervisor runs on the leader, so nothing
here wakes: waiters read the database again every `RECHECK_SECONDS` instead."""

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

    def notify(self) -> None:
        """Some board's observed state changed: wake every waiter."""
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop has closed; its waiter is gone
                continue

    async def wait(self, timeout: float) -> bool:
        """Until the next notify() (True) or `timeout` seconds (False)."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
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
