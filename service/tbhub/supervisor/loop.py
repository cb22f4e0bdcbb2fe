"""The reconcile loop: observe -> plan -> apply, at start-up, on a timer and when woken."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub import audit
from tbhub.boards import AccessTracker, cull_idle_boards, flush_access
from tbhub.db import transaction
from tbhub.errors import UnsafePath
from tbhub.models import Board, DesiredState, ObservedState, Project
from tbhub.storage.paths import project_dir
from tbhub.supervisor.backends.base import Backend
from tbhub.supervisor.plan import (
    BoardSpec,
    Desired,
    Forget,
    Instance,
    Observed,
    Start,
    Stop,
    board_prefix,
    plan,
)

log = logging.getLogger("tbhub.supervisor")

# While a board starts, look again soon; otherwise the timer interval applies.
FAST_INTERVAL = 0.1
MAX_RESTART_BACKOFF = 300.0


def restart_backoff(failures: int) -> float:
    """Seconds before the next start after `failures` crashes in a row: 1, 2, 4 ... 300."""
    return float(min(2 ** max(failures - 1, 0), MAX_RESTART_BACKOFF))


def board_spec(project: str, storage_root: str) -> BoardSpec:
    logdir = project_dir(Path(storage_root), project)
    return BoardSpec(project=project, logdir=str(logdir), path_prefix=board_prefix(project))


def probe_ready(instance: Instance, client: httpx.Client) -> bool:
    """Ready means /data/environment answers 200: unlike /data/logdir it needs the data server."""
    if not instance.alive or instance.upstream is None:
        return False
    url = f"http://{instance.upstream}{board_prefix(instance.project)}/data/environment"
    try:
        response = client.get(url)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


class Supervisor:
    def __init__(
        self,
        *,
        factory: sessionmaker[Session],
        backend: Backend,
        tracker: AccessTracker,
        storage_root: str,
        idle_timeout: float,
        start_timeout: float,
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.factory = factory
        self.backend = backend
        self.tracker = tracker
        self.storage_root = storage_root
        self.idle_timeout = idle_timeout
        self.start_timeout = start_timeout
        self.interval = interval
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._http = httpx.Client(timeout=2.0)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tbhub-apply")

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        reaped = self.backend.reap_unknown()
        if reaped:
            log.warning("stopped %d board process(es) no state file knew: %s", len(reaped), reaped)
        self._thread = threading.Thread(target=self._run, name="tbhub-supervisor", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def shutdown(self, *, stop_boards: bool) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if stop_boards:
            instances = self.backend.list_instances()
            list(self._pool.map(self.backend.stop, instances))
        self._pool.shutdown(wait=True)
        self._http.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = False
            try:
                busy = self.reconcile_once()
            except Exception:  # the loop must survive a bad pass; the next one retries
                log.exception("reconcile pass failed")
            self._wake.wait(FAST_INTERVAL if busy else self.interval)
            self._wake.clear()

    # -- one pass --------------------------------------------------------------------------

    def reconcile_once(self) -> bool:
        """Run one pass. True while some board is still starting."""
        now = self.clock()
        desired = self._read_desired(datetime.fromtimestamp(now, UTC))
        actual = self._observe()
        result = plan(desired, actual, now=now, start_timeout=self.start_timeout)
        errors = self._apply(result.actions)
        self._write_observed(result.observed, errors, failed=result.failed | set(errors))
        return any(o.state == ObservedState.starting for o in result.observed.values())

    def _read_desired(self, now: datetime) -> dict[str, Desired]:
        with transaction(self.factory) as session:
            flush_access(session, self.tracker.drain())
            for project_id in cull_idle_boards(session, now=now, idle_timeout=self.idle_timeout):
                audit.record(
                    session, actor="supervisor", action="board.idle_stop", target=str(project_id)
                )
            rows = session.execute(
                select(Project.name, Board.desired_state, Board.retry_at).join(
                    Board, Board.project_id == Project.id
                )
            ).all()
        desired = {}
        for name, state, retry_at in rows:
            try:
                spec = board_spec(name, self.storage_root)
            except UnsafePath as exc:
                # Left out of the desired set, so a board serving it is stopped too.
                log.error("not serving project %s: %s", name, exc.message)
                continue
            desired[name] = Desired(
                spec=spec,
                running=state == DesiredState.running,
                retry_at=retry_at.timestamp() if retry_at is not None else None,
            )
        return desired

    def _observe(self) -> list[Instance]:
        instances = self.backend.list_instances()
        ready = self._pool.map(lambda i: probe_ready(i, self._http), instances)
        return [replace(i, ready=ok) for i, ok in zip(instances, ready, strict=True)]

    def _apply(self, actions: list[Start | Stop | Forget]) -> dict[str, str]:
        """Carry out the actions in parallel; return an error message per project."""
        errors: dict[str, str] = {}

        def run(action: Start | Stop | Forget) -> None:
            try:
                if isinstance(action, Start):
                    log.info("starting board %s", action.spec.project)
                    self.backend.start(action.spec)
                elif isinstance(action, Stop):
                    log.info("stopping board %s: %s", action.instance.project, action.reason)
                    self.backend.stop(action.instance)
                else:
                    tail = self.backend.log_tail(action.instance)
                    log.warning("board %s exited:\n%s", action.instance.project, tail)
                    errors[action.instance.project] = f"board process exited; last output:\n{tail}"
                    self.backend.forget(action.instance)
            except Exception as exc:
                project = (
                    action.spec.project if isinstance(action, Start) else action.instance.project
                )
                log.exception("action %r failed", action)
                errors[project] = f"{type(exc).__name__}: {exc}"

        list(self._pool.map(run, actions))
        return errors

    def _write_observed(
        self, observed: dict[str, Observed], errors: dict[str, str], *, failed: set[str]
    ) -> None:
        now = datetime.fromtimestamp(self.clock(), UTC)
        with transaction(self.factory) as session:
            rows = session.execute(
                select(Project.name, Board).join(Board, Board.project_id == Project.id)
            ).all()
            for name, board in rows:
                seen = observed.get(name)
                if seen is None:
                    continue
                state = ObservedState(seen.state)
                if (board.observed_state, board.upstream) != (state, seen.upstream):
                    board.observed_at = now
                board.observed_state = state
                board.upstream = seen.upstream
                board.instance_id = seen.instance_id
                error = seen.error or errors.get(name)
                if error is not None:
                    board.last_error = error[-4000:]
                if name in failed:
                    board.failures += 1
                    board.retry_at = now + timedelta(seconds=restart_backoff(board.failures))
                    log.warning("board %s failed %d time(s) in a row", name, board.failures)
                elif state == ObservedState.ready:
                    board.failures, board.retry_at = 0, None
