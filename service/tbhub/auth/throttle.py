"""Failed sign-ins slow an attacker down without letting them lock anyone out.

- Hard, per (account name, client address): waits that double, then a lockout. What one
  address gets wrong locks that address out of that account, never the account itself.
- Hard, per client address, more lenient (many people may share one): one address trying
  many accounts.
- Soft, per account name: failures from every address make each attempt on the account
  wait a little on the server before its password is checked (a delay of at most
  `SOFT_DELAY_MAX` seconds, never a refusal), so the account's owner still signs in from
  their own address while an attacker elsewhere is slowed down.

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


SOFT_DELAY_MAX = 4.0  # the longest an account under attack makes any attempt wait


@dataclass(frozen=True)
class SoftPolicy:
    """An account's delay: none for `free_failures` failures in `window`, then `first_delay`
    doubling with each failure, up to `max_delay`."""

    free_failures: int = 10
    first_delay: float = 0.5
    max_delay: float = SOFT_DELAY_MAX
    window: float = 900.0


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

    def failures(self, key: str) -> int:
        """Failures of `key` within the window."""
        now = self._clock()
        with self._lock:
            record = self._records.get(key)
            if record is None or now - record.last_failure > self.policy.window:
                return 0
            return record.failures

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


class AccountDelay:
    """Failures of one account name from every address -> a short, bounded delay."""

    def __init__(self, policy: SoftPolicy, clock: Callable[[], float]) -> None:
        self.policy = policy
        # The same bookkeeping (window, bounded memory), never locking: lockout unreachable.
        self._counts = SignInThrottle(
            ThrottlePolicy(lockout_failures=2**62, window=policy.window), clock=clock
        )

    def seconds(self, name: str) -> float:
        failures = self._counts.failures(name)
        slowed = failures - self.policy.free_failures
        if slowed < 0:
            return 0.0
        return min(self.policy.max_delay, self.policy.first_delay * 2 ** min(slowed, 32))

    def failed(self, name: str) -> None:
        self._counts.failed(name)


class SignInGuard:
    """The throttles a sign-in passes: refusals per (account, address) and per address
    (`wait_seconds`), and a delay per account (`delay_seconds`: the caller sleeps it)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.pairs = SignInThrottle(clock=clock)
        self.addresses = SignInThrottle(
            ThrottlePolicy(free_failures=20, lockout_failures=50), clock=clock
        )
        self.accounts = AccountDelay(SoftPolicy(), clock)
        self._sleep = sleep

    @staticmethod
    def _pair(name: str, address: str) -> str:
        return f"{name.lower()}\n{address}"

    def wait_seconds(self, name: str, address: str) -> float:
        """How long this address must wait before trying this account again (0: now)."""
        return max(self.pairs.wait_seconds(self._pair(name, address)),
                   self.addresses.wait_seconds(address))  # fmt: skip

    def delay_seconds(self, name: str) -> float:
        """How long any attempt on this account is held before its password is checked."""
        return self.accounts.seconds(name.lower())

    def hold(self, name: str) -> None:
        """Hold the attempt for the account's delay (the route's thread, not the loop)."""
        delay = self.delay_seconds(name)
        if delay > 0:
            self._sleep(delay)

    def failed(self, name: str, address: str) -> None:
        self.pairs.failed(self._pair(name, address))
        self.addresses.failed(address)
        self.accounts.failed(name.lower())

    def succeeded(self, name: str, address: str) -> None:
        self.pairs.succeeded(self._pair(name, address))
