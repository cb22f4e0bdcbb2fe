"""The scan's worker processes end with the process that made them (storage/scan.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.e2e.harness import wait_until

PARENT = """
import os, sys, time
from tbhub.storage.scan import worker_pool
pool = worker_pool(2)
assert pool.submit(os.getpid).result() != os.getpid()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("threads", [1, 2], ids=["forked", "spawned"])
def test_workers_die_with_a_parent_killed_mid_scan(threads: int) -> None:
    # With a second thread running, the pool spawns its workers instead of forking them.
    prelude = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"  # noqa: E501
    script = (prelude if threads == 2 else "") + PARENT
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)  # fmt: skip
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        workers = [p for p in psutil.Process(parent.pid).children(recursive=True)
                   if "resource_tracker" not in " ".join(p.cmdline())]  # fmt: skip
        assert workers, "the pool started no worker"
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE
                                   for w in workers),
                   timeout=10, what="the workers to end with their parent")  # fmt: skip
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)  # the group holds anything left behind
        parent.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()
