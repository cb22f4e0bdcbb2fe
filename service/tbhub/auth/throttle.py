"""Failed sign-ins slow down, then lock out, per account name and per client address.

Pure bookkeeping over an injected clock, kept in memory by each control-plane process
(replicas each count their own). A name is counted whether or not such an account exists,
so the answers never reveal which names are real.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ThrottlePolicy:
    free_failures: int = 5  # failures within `window` before any wait
    lockout_failures: int = 10  # failures within `window` that lock the key out
    first_wait: float = 2.0  # seconds after the first slowed failure, doubling each time
    lockout: float = 900.0  # seconds a locked key stays refused
    window: float = 900.0  # failures older than this are forgotten
    max_keys: int = 100_000  # bound the memory an attacker can make us use


@dataclass
class _Record:
    failures: int
    last_failure: float
    locked_until: float = 0.0


class SignInThrottle:
    def __init__(
        self, policy: ThrottlePolicy | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy or ThrottlePolicy()
        self._clock = clock
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}

    def wait_seconds(self, *keys: str) -> float:
        """How long the caller must wait before another attempt with any of `keys` (0: now)."""
        now = self._clock()
        with self._lock:
            return max((self._wait(self._records.get(key), now) for key in keys), default=0.0)

    def _wait(self, record: _Record | None, now: float) -> float:
        if record is None or now - record.last_failure > self.policy.window:
            return 0.0
        if record.locked_until > now:
            return record.locked_until - now
        slowed = record.failures - self.policy.free_failures
        if slowed < 0:
            return 0.0
        return max(0.0, record.last_failure + self.policy.first_wait * 2**slowed - now)

    def failed(self, *keys: str) -> None:
        now = self._clock()
        with self._lock:
            if len(self._records) >= self.policy.max_keys:
                self._forget_old(now)
            for key in keys:
                record = self._records.get(key)
                if record is None or now - record.last_failure > self.policy.window:
                    record = self._records[key] = _Record(0, now)
                record.failures += 1
                record.last_failure = now
                if record.failures >= self.policy.lockout_failures:
                    record.locked_until = now + self.policy.lockout

    def succeeded(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._records.pop(key, None)

    def _forget_old(self, now: float) -> None:
        window = self.policy.window
        stale = [k for k, r in self._records.items()
                 if now - r.last_failure > window and r.locked_until <= now]  # fmt: skip
        for key in stale:
            del self._records[key]
        if len(self._records) >= self.policy.max_keys:  # still full: drop the oldest half
            oldest = sorted(self._records, key=lambda k: self._records[k].last_failure)
            for key in oldest[: len(oldest) // 2]:
                del self._records[key]


class SignInGuard:
    """The two throttles a sign-in passes: its account name, and its client address (more
    lenient: many people may share one address)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.accounts = SignInThrottle(clock=clock)
        self.addresses = SignInThrottle(
            ThrottlePolicy(free_failures=20, lockout_failures=50), clock=clock
        )

    def wait_seconds(self, name: str, address: str) -> float:
        return max(self.accounts.wait_seconds(name.lower()),
                   self.addresses.wait_seconds(address))  # fmt: skip

    def failed(self, name: str, address: str) -> None:
        self.accounts.failed(name.lower())
        self.addresses.failed(address)

    def succeeded(self, name: str) -> None:
        self.accounts.succeeded(name.lower())
