"""An API worker: one more process that answers the control plane's HTTP for `tbhub serve`
(TBHUB_API_WORKERS), started by serve/workers.py. It has the app and its caches, and no
duties: the supervisor, the watcher, the monitor and the jobs run in the first process only.
What it sees for that process it passes on: a wish for a board wakes the supervisor through
a pipe, the boards its auth hook let people into are written for the idle culler, and a
change of who may do what bumps the caches' shared generations (core/cache_generations.py).
What the supervisor writes comes back through a pipe of its own: the worker reads the boards
again and wakes its waiters at once, as the first process does.

    python -m tbhub.serve.api_worker   (a pickled WorkerSpec on stdin)
"""

from __future__ import annotations

import gc
import logging
import os
import pickle
import socket
import sys
import threading
from collections.abc import Callable

from tbhub.core.log_context import configure_logging
from tbhub.core.processes import end_with_parent
from tbhub.http.deps import AppContext
from tbhub.serve.api_process import board_observed, run_api_server, start_metrics
from tbhub.serve.app import build_context, create_app
from tbhub.serve.cache_events import announcer, on_postgresql
from tbhub.serve.replica import write_accesses
from tbhub.serve.workers import WorkerSpec, poke
from tbhub.storage.scalars import load_reader

log = logging.getLogger("tbhub")


class AccessWriter:
    """The worker's part of the idle culler's input: the boards its auth hook let people
    into, written every reconcile interval, and once more on the way out."""

    def __init__(self, context: AppContext) -> None:
        self.context = context
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tbhub-accesses", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        write_accesses(self.context.factory, self.context.tracker)

    def _run(self) -> None:
        while not self._stop.wait(self.context.settings.reconcile_interval):
            try:
                write_accesses(self.context.factory, self.context.tracker)
            except Exception:  # the thread must outlive a bad pass; the next one retries
                log.exception("writing board accesses failed")


def waker(fd: int) -> Callable[[], None]:
    """`wake_supervisor` in a worker: a byte down the pipe to the first process."""
    os.set_blocking(fd, False)
    return lambda: poke(fd)


def follow_board_changes(fd: int, context: AppContext) -> threading.Thread:
    """A thread that, for each byte from the first process (the supervisor wrote a change),
    drops the worker's snapshot of the boards and wakes its starting pages and held
    navigations; it ends with the pipe (the first process gone)."""

    def follow() -> None:
        with os.fdopen(fd, "rb", buffering=0) as changes:
            while changes.read(512):
                board_observed(context)

    thread = threading.Thread(target=follow, name="tbhub-board-changes", daemon=True)
    thread.start()
    return thread


def run(spec: WorkerSpec) -> None:
    end_with_parent(spec.parent)
    settings = spec.settings
    configure_logging(settings.log_format)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    start_metrics(settings, fresh=False)
    context = build_context(settings)
    if on_postgresql(settings.db_url):
        context.generations.announce = announcer(context.engine, spec.origin)
    context.wake_supervisor = waker(spec.wake_fd)
    follow_board_changes(spec.changes_fd, context)
    app = create_app(context, duties=AccessWriter(context))
    listener = socket.socket(fileno=spec.listen_fd)
    load_reader()
    gc.collect()
    gc.freeze()  # as in the first process (server.py): start-up's objects out of the GC's way
    run_api_server(app, listener)


def main() -> None:
    spec = pickle.load(sys.stdin.buffer)  # from our parent, `tbhub serve`, alone
    if not isinstance(spec, WorkerSpec):
        raise SystemExit("tbhub.serve.api_worker: expected a WorkerSpec on stdin")
    run(spec)


if __name__ == "__main__":
    main()
