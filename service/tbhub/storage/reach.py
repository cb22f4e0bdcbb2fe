"""Calls on a project's storage that cannot hang their caller.

On a network filesystem a read can block for as long as the server is away (a hard NFS
mount, a stopped sshfs) or fail with ENOTCONN or ESTALE once the connection dropped. A
request handler, the supervisor's pass or the watcher that made such a call itself would
wait with it, and every other project behind it. `within` runs the call in a thread of its
own and waits at most `timeout`: past that, or on a lost mount, it raises
StorageUnavailable and the caller answers from what the database knows. A call left
waiting goes on in its thread; while MAX_WAITING of one key's calls are left waiting, or
MAX_IN_FLIGHT run at once, the next fails at once: a hung mount holds a few threads, never
the whole pool.

A step that must run in its caller's thread (an upload's write: storage/receive.py) gets
the same answer for a lost mount through `answered_if_lost`, without the bound.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from tbhub.core.errors import StorageUnavailable
from tbhub.core.fstype import is_mount_lost

T = TypeVar("T")

DEFAULT_WAIT = 5.0  # seconds a request waits for a project's storage
MAX_WAITING = 2  # calls per key left waiting on a hung mount before the next fails at once
MAX_IN_FLIGHT = 8  # calls per key under way at once (a burst before any has timed out)

_lock = threading.Lock()
_waiting: dict[str, int] = {}  # calls whose caller gave up, still running
_in_flight: dict[str, int] = {}


def unavailable_message(project: str) -> str:
    return (
        f"the storage of project {project} is not answering (its network mount may be hung "
        "or disconnected); its runs as last seen are shown, and its files come back when "
        "the mount does"
    )


@contextmanager
def answered_if_lost(
    key: str, message: Callable[[str], str] = unavailable_message
) -> Iterator[None]:
    """A lost mount's error inside the block raised as StorageUnavailable(message(key));
    any other error passes through."""
    try:
        yield
    except OSError as exc:
        if is_mount_lost(exc):
            raise StorageUnavailable(message(key)) from exc
        raise


def is_waiting(key: str) -> bool:
    """Whether calls on `key` are still left waiting on its storage."""
    with _lock:
        return _waiting.get(key, 0) > 0


def _count_down(counts: dict[str, int], key: str) -> None:
    counts[key] -= 1
    if not counts[key]:
        del counts[key]


@dataclass
class _Call:
    value: object = None
    error: BaseException | None = None
    finished: bool = False
    late: bool = False  # the caller gave up; the thread still counts in _waiting
    done: threading.Event = field(default_factory=threading.Event)


def within(
    key: str,
    call: Callable[[], T],
    *,
    timeout: float = DEFAULT_WAIT,
    message: Callable[[str], str] = unavailable_message,
    max_waiting: int = MAX_WAITING,
    max_in_flight: int = MAX_IN_FLIGHT,
    discard: Callable[[T], object] | None = None,
) -> T:
    """`call()`'s result, or StorageUnavailable(message(key)) when it takes longer than
    `timeout` or fails because the mount is lost. Other errors pass through. `discard`
    releases a result that comes after its caller gave up (an open descriptor, say)."""
    with _lock:
        if _waiting.get(key, 0) >= max_waiting or _in_flight.get(key, 0) >= max_in_flight:
            raise StorageUnavailable(message(key))
        _in_flight[key] = _in_flight.get(key, 0) + 1
    state = _Call()

    def run() -> None:
        try:
            state.value = call()
        except BaseException as exc:  # handed to the caller, whatever it is
            state.error = exc
        with _lock:
            state.finished = True
            late = state.late
            _count_down(_in_flight, key)
            if late:
                _count_down(_waiting, key)
        state.done.set()
        if late and discard is not None and state.error is None:
            discard(state.value)  # type: ignore[arg-type]

    threading.Thread(target=run, name=f"storage-{key}", daemon=True).start()
    if not state.done.wait(timeout):
        with _lock:
            if not state.finished:
                state.late = True
                _waiting[key] = _waiting.get(key, 0) + 1
        if state.late:
            raise StorageUnavailable(message(key))
        state.done.wait()
    if state.error is not None:
        with answered_if_lost(key, message):
            raise state.error
    return state.value  # type: ignore[return-value]
