"""storage/reach.within: a call on a project's storage that hangs costs its caller a bounded
wait, and a hung key holds a few threads at most."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from tbhub.core.errors import NotFound, StorageUnavailable
from tbhub.storage import reach


def test_an_answer_in_time_is_returned() -> None:
    assert reach.within("fast", lambda: 42, timeout=5) == 42


def test_a_hung_call_costs_the_timeout_then_later_calls_fail_at_once() -> None:
    release = threading.Event()
    started: list[int] = []

    def hang() -> int:
        started.append(1)
        release.wait(30)
        return 1

    try:
        for _ in range(reach.MAX_WAITING):
            with pytest.raises(StorageUnavailable, match="project hung is not answering"):
                reach.within("hung", hang, timeout=0.2)
        assert reach.is_waiting("hung")
        with pytest.raises(StorageUnavailable):
            reach.within("hung", hang, timeout=0.2)
        assert len(started) == reach.MAX_WAITING  # the last call never started a thread
        assert reach.within("other", lambda: "ok", timeout=1) == "ok"
    finally:
        release.set()
    threading.Event().wait(0.5)  # the released calls finish
    assert not reach.is_waiting("hung")
    assert reach.within("hung", lambda: "back", timeout=5) == "back"


@pytest.mark.parametrize("code", [errno.ENOTCONN, errno.ESTALE, errno.EIO])
def test_a_lost_mount_is_storage_unavailable(code: int) -> None:
    def lost() -> None:
        raise OSError(code, "lost")

    with pytest.raises(StorageUnavailable) as raised:
        reach.within("lost", lost, timeout=5)
    assert raised.value.http_status == 503


def test_other_errors_pass_through() -> None:
    def missing() -> None:
        raise NotFound("no such run")

    with pytest.raises(NotFound):
        reach.within("missing", missing, timeout=5)
    with pytest.raises(FileNotFoundError):
        reach.within("missing", lambda: os.stat("/nonexistent/file"), timeout=5)


def test_a_result_that_comes_after_its_caller_gave_up_is_discarded() -> None:
    release, discarded = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(30)
        return "late"

    with pytest.raises(StorageUnavailable):
        reach.within("late", slow, timeout=0.1,
                     discard=lambda value: value == "late" and discarded.set())  # fmt: skip
    release.set()
    assert discarded.wait(10)
