"""The reconcile loop: observe -> plan -> apply, at start-up, on a timer and when woken."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import StorageUnavailable, TbhubError
from tbhub.core.models import ObservedState
from tbhub.core.names import is_compare_slug
from tbhub.core.settings import Settings
from tbhub.domain.boards import (
    AccessTracker,
    BoardRef,
    auth_cache_seconds,
    upstream_hold_seconds,
)
from tbhub.storage.compare_view import (
    COMPARE_DIR_NAME,
    SYNC_SECONDS,
    ViewRun,
    remove_views,
    sync_view,
)
from tbhub.storage.links import LINK_CHECK_SECONDS, first_outside_link
from tbhub.storage.reach import within
from tbhub.supervisor.backends.base import Backend
from tbhub.supervisor.board_process import plugin_errors
from tbhub.supervisor.metrics import SupervisorMetrics
from tbhub.supervisor.observe import Observer
from tbhub.supervisor.plan import (
    Desired,
    Forget,
    Health,
    Instance,
    Observed,
    Plan,
    Policy,
    Start,
    Stop,
    plan,
)
from tbhub.supervisor.state import Limits, read_desired, write_observed, write_ready

log = logging.getLogger("tbhub.supervisor")

# While a board starts, look again soon; otherwise the timer interval applies.
FAST_INTERVAL = 0.1
# Meanwhile its health probe is asked this often, so the pass that marks it ready comes as
# soon as it answers, not up to FAST_INTERVAL later (a board of a few runs starts in 0.2 s).
READY_POLL = 0.01
# A board whose address is not known yet (one the last pass started: a local board tells its
# port once it listens) is looked up again this often meanwhile, it alone
# (`Observer.relisted`: its state file and the head of its log). It was 20 ms while that read
# every board's state: up to 20 ms of a 0.15 s view start spent waiting on this poll.
RELIST_POLL = 0.005
# Seconds a pass waits for one project's symlink check (or a compare view's links) before
# calling its storage unavailable; the check goes on and is asked for again next pass.
LINK_CHECK_WAIT = 10.0
PLUGIN_LOG_LINES = 400  # of a board's log read when it is ready: its plugins' load errors


def policy_from_settings(settings: Settings) -> Policy:

    return Policy(
        start_timeout=settings.board_start_timeout,
        hung_after=settings.board_hung_probes,
        drain_hold=upstream_hold_seconds(auth_cache_seconds(settings.idle_timeout)),
        memory_fresh=settings.board_memory_fresh_seconds,
        budget=settings.memory_budget_bytes,
    )


def busy(result: Plan, actual: list[Instance]) -> bool:
    """Look again soon: a board starts (a cold start, or a replacement started this pass and
    not yet seen), or a ready replacement waits to list the old board's runs before the
    switch. Only the interval's full passes would otherwise notice, one interval late."""
    return (
        any(o.state == ObservedState.starting for o in result.observed.values())
        or any(isinstance(a, Start) for a in result.actions)
        or bool(result.catching_up)
        or any(
            i.alive and h.ready_at is None
            for i in actual
            if (h := result.health.get(i.instance_id)) is not None
        )
    )


class Supervisor:
    def __init__(
        self,
        *,
        factory: sessionmaker[Session],
        backend: Backend,
        tracker: AccessTracker[BoardRef],
        storage_root: str,
        compare_root: str | None = None,
        idle_timeout: float,
        interval: float,
        policy: Policy,
        limits: Limits | None = None,
        probe_timeout: float = 2.0,
        metrics: SupervisorMetrics | None = None,
        clock: Callable[[], float] = time.time,
        may_act: Callable[[], bool] = lambda: True,
        on_observed: Callable[[], None] = lambda: None,
    ) -> None:
        """`may_act` is asked before a pass changes anything (boards or the database): a
        replica that may have lost the leader's lock answers False (replica.py).
        `on_observed` is called once a pass has written a change to what it observed (a
        board ready, failed, stopped...): the starting pages waiting on it answer at once."""
        self.factory = factory
        self.backend = backend
        self.tracker = tracker
        self.storage_root = storage_root
        self.compare_root = compare_root or str(Path(storage_root) / COMPARE_DIR_NAME)
        self.idle_timeout = idle_timeout
        self.interval = interval
        self.policy = policy
        self.limits = limits or Limits(memory_limit=None)
        self.metrics = metrics or SupervisorMetrics()
        self.clock = clock
        self.may_act = may_act
        self.on_observed = on_observed
        self._observed: dict[str, Observed] = {}
        # Alive and not yet ready in the last pass, with those it started.
        self._starting: list[Instance] = []
        self._alive: Counter[str] = Counter()  # alive instances per project, last pass
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tbhub-apply")
        self._observer = Observer(backend, self._pool, probe_timeout)
        # Per-instance observations carried between passes (plan.Health).
        self._health: dict[str, Health] = {}
        self._memory_measured_at = float("-inf")
        # project -> (when its tree was last checked for links out of it, the link found)
        self._links: dict[str, tuple[float, str | None]] = {}
        # compare board -> (when its view was last synced, the error that stopped it)
        self._views: dict[str, tuple[float, str | None]] = {}

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
            if instances:
                log.info("shutting down: stopping %d board(s)", len(instances))
            list(self._pool.map(self.backend.stop, instances))
        self._pool.shutdown(wait=True)
        self._observer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            busy = False
            try:
                busy = self.reconcile_once()
            except Exception:  # the loop must survive a bad pass; the next one retries
                log.exception("reconcile pass failed")
            if busy:
                self._await_ready(FAST_INTERVAL)
            else:
                self._wake.wait(self.interval)
            self._wake.clear()

    def _await_ready(self, limit: float) -> None:
        """Wait up to `limit` for a wake-up, asking the starting boards' health probe every
        READY_POLL meanwhile: returns as soon as one of them answers, once it is written
        ready (`_write_ready`). While one's address is not known yet they are listed again
        every RELIST_POLL instead, so the probe starts as soon as the board listens."""
        deadline = time.monotonic() + limit
        while not self._wake.is_set() and (left := deadline - time.monotonic()) > 0:
            unknown = any(i.upstream is None for i in self._starting)
            if unknown:
                self._starting = self._observer.relisted(self._starting)
            ready = next((i for i in self._starting if self._observer.ready(i, timeout=left)), None)
            if ready is not None:
                self._write_ready(ready)
                return
            self._wake.wait(min(RELIST_POLL if unknown else READY_POLL, left))

    def _write_ready(self, instance: Instance) -> None:
        """Record a board that was starting, the only instance of its project, as ready the
        moment its probe answers, and tell the gate; the pass that follows records the rest
        (its health, plugin errors, metrics). A full pass first took 15-20 ms on a quiet
        2-core host and 40-200 ms on a loaded one, readers waiting on it. A replacement is
        left to the pass: it takes over once it lists the old board's runs."""
        seen = self._observed.get(instance.project)
        if seen is None or seen.state != ObservedState.starting or instance.upstream is None:
            return
        if self._alive[instance.project] > 1 or not self.may_act():
            return
        with transaction(self.factory) as session:
            written = write_ready(session, instance.project, instance_id=instance.instance_id,
                                  upstream=instance.upstream,
                                  now=datetime.fromtimestamp(self.clock(), UTC))  # fmt: skip
        if written:
            self._observed[instance.project] = replace(
                seen, state=ObservedState.ready, upstream=instance.upstream,
                instance_id=instance.instance_id,
            )  # fmt: skip
            self.on_observed()

    # -- one pass --------------------------------------------------------------------------

    def reconcile_once(self) -> bool:
        """Run one pass. True while some board is still starting."""
        began = time.perf_counter()
        now = self.clock()
        with transaction(self.factory) as session:
            read = read_desired(
                session,
                accesses=self.tracker.drain(),
                now=datetime.fromtimestamp(now, UTC),
                idle_timeout=self.idle_timeout,
                storage_root=self.storage_root,
                limits=self.limits,
                compare_root=self.compare_root,
            )
        desired = read.desired
        # A full pass (every interval) probes every board and reads its PSS; the fast passes
        # while a board starts probe only boards that are not settled.
        full = now - self._memory_measured_at >= self.interval * 0.9
        settled = {iid for iid, h in self._health.items() if h.ready_at is not None}
        actual = self._observer.observe(full=full, settled=settled)
        self._starting = [i for i in actual if i.alive and i.probed and not i.ready]
        self._alive = Counter(i.project for i in actual if i.alive)
        if full:
            self._memory_measured_at = now
        desired = self._check_links(desired, actual, now)
        desired = self._sync_views(desired, read.views, actual, now)
        result = plan(desired, actual, now=now, policy=self.policy, health=self._health)
        if not self.may_act():
            log.warning("reconcile pass skipped: this replica's leadership is not confirmed")
            return False
        plugin_errors = self._note_ready(actual, result)
        self._health = result.health
        errors, started = self._apply(result.actions)
        self._starting += started
        self._alive.update(i.project for i in started)
        restarts = {a.spec.project: a.reason for a in result.actions
                    if isinstance(a, Start) and a.reason}  # fmt: skip
        serving = {o.instance_id for o in result.observed.values() if o.instance_id}
        pss = {i.project: i.pss_bytes for i in actual
               if i.instance_id in serving and i.pss_bytes is not None}  # fmt: skip
        with transaction(self.factory) as session:
            write_observed(
                session,
                result,
                errors=errors,
                restarts=restarts,
                pss=pss,
                plugin_errors=plugin_errors,
                now=datetime.fromtimestamp(self.clock(), UTC),
                settled=read.settled,
            )
        if result.observed != self._observed:
            self._observed = dict(result.observed)
            self.on_observed()
        if full:
            self._remove_stopped_views(desired, actual)
        self.metrics.count_pass(
            [a.reason for a in result.actions if isinstance(a, Start)],
            swaps=sum(1 for name, seen in result.observed.items()
                      if seen.instance_id and name in desired
                      and desired[name].serving not in (None, seen.instance_id)),
        )  # fmt: skip
        self.metrics.publish_health()
        self.metrics.reconcile_seconds.observe(time.perf_counter() - began)
        return busy(result, actual)

    def _check_links(
        self, desired: dict[str, Desired], actual: list[Instance], now: float
    ) -> dict[str, Desired]:
        """Look for symlinks out of each wanted project: before a start, then every
        LINK_CHECK_SECONDS while its board runs (storage/links.py)."""
        live = {i.project for i in actual if i.alive}
        due = [
            name
            for name, want in desired.items()
            if want.running
            and want.refusal is None
            and want.storage_unavailable is None
            and (name not in live or now - self._links.get(name, (float("-inf"), None))[0]
                 >= LINK_CHECK_SECONDS)
        ]  # fmt: skip

        def check(name: str) -> str | StorageUnavailable | None:
            logdir = Path(desired[name].spec.logdir)
            try:
                return within(name, lambda: first_outside_link(logdir),
                              timeout=LINK_CHECK_WAIT, max_waiting=1)  # fmt: skip
            except StorageUnavailable as exc:  # checked again at the next pass
                return exc

        unavailable: dict[str, str] = {}
        for name, link in zip(due, self._pool.map(check, due), strict=True):
            if isinstance(link, StorageUnavailable):
                unavailable[name] = link.message
                continue
            if link is not None and self._links.get(name, (0.0, None))[1] != link:
                log.error("not serving project %s: symlink %s leads outside it", name, link)
            self._links[name] = (now, link)
        checked = {
            name: replace(want, unsafe_link=self._links[name][1]) if name in self._links else want
            for name, want in desired.items()
        }
        for name, message in unavailable.items():
            checked[name] = replace(checked[name], storage_unavailable=message)
        return checked

    def _sync_views(
        self,
        desired: dict[str, Desired],
        views: dict[str, tuple[ViewRun, ...]],
        actual: list[Instance],
        now: float,
    ) -> dict[str, Desired]:
        """Bring each wanted compare board's view of hard links up to date with its runs:
        before it starts, then every SYNC_SECONDS while it runs (new event files need new
        links). A view that cannot be built refuses its board, with the reason."""
        live = {i.project for i in actual if i.alive}
        due = [
            slug
            for slug in views
            if slug not in live
            or now - self._views.get(slug, (float("-inf"), None))[0] >= SYNC_SECONDS
        ]

        def sync(slug: str) -> str | None:
            root, compare_root = Path(self.storage_root), Path(self.compare_root)
            try:
                within(slug, lambda: sync_view(root, compare_root, slug, views[slug]),
                       timeout=LINK_CHECK_WAIT, max_waiting=1)  # fmt: skip
            except TbhubError as exc:  # StorageUnavailable too: a run's mount hangs
                return exc.message
            except OSError as exc:
                return f"the compare view could not be built: {exc}"
            return None

        for slug, error in zip(due, self._pool.map(sync, due), strict=True):
            if error is not None and self._views.get(slug, (0.0, None))[1] != error:
                log.error("not serving compare board %s: %s", slug, error)
            self._views[slug] = (now, error)
        self._views = {slug: seen for slug, seen in self._views.items() if slug in views}
        return {
            name: replace(want, refusal=self._views[name][1]) if name in self._views else want
            for name, want in desired.items()
        }

    def _remove_stopped_views(self, desired: dict[str, Desired], actual: list[Instance]) -> None:
        """Delete the views of compare boards that neither should run nor still run, so no
        view keeps the bytes of a run that retention removed."""
        keep = {name for name, want in desired.items() if want.running}
        keep |= {i.project for i in actual if i.alive}
        try:
            removed = remove_views(Path(self.compare_root), {n for n in keep if is_compare_slug(n)})
        except (OSError, TbhubError):
            log.exception("could not remove stopped compare views under %s", self.compare_root)
            return
        if removed:
            log.info("removed the views of stopped compare boards: %s", ", ".join(removed))

    def _note_ready(self, actual: list[Instance], result: Plan) -> dict[str, list[dict[str, str]]]:
        """Log each board's first ready probe, with the time it took; return the plugins each
        of those boards left out (from its log), by project."""
        found: dict[str, list[dict[str, str]]] = {}
        for instance in actual:
            before = self._health.get(instance.instance_id)
            after = result.health.get(instance.instance_id)
            if after is None or after.ready_at is None:
                continue
            if before is None or before.ready_at is None:
                took = after.ready_at - instance.started_at
                if took < self.policy.start_timeout:  # not a board adopted after a restart
                    self.metrics.start_latency.observe(max(took, 0.0))
                log.info("board %s ready in %.1fs (%s)", instance.project, took,
                         instance.instance_id)  # fmt: skip
                found[instance.project] = self._plugin_errors(instance)
        return found

    def _plugin_errors(self, instance: Instance) -> list[dict[str, str]]:
        try:
            tail = self.backend.log_tail(instance, lines=PLUGIN_LOG_LINES)
        except Exception:  # a log gone or unreadable: no word on plugins, not a failure
            log.exception("reading the log of board %s failed", instance.project)
            return []
        errors = plugin_errors(tail)
        for item in errors:
            log.warning("board %s left out plugin %s: %s", instance.project, item["plugin"],
                        item["error"])  # fmt: skip
        return errors

    def _apply(self, actions: list[Start | Stop | Forget]) -> tuple[dict[str, str], list[Instance]]:
        """Carry out the actions in parallel; return an error message per project, and the
        instances started."""
        errors: dict[str, str] = {}
        started: list[Instance] = []

        def run(action: Start | Stop | Forget) -> None:
            try:
                if isinstance(action, Start):
                    if action.reason:
                        log.info("restarting board %s (reason: %s)", action.spec.project,
                                 action.reason)  # fmt: skip
                    else:
                        log.info("starting board %s", action.spec.project)
                    started.append(self.backend.start(action.spec))
                elif isinstance(action, Stop):
                    log.info("stopping board %s (%s): %s", action.instance.project,
                             action.instance.instance_id, action.reason)  # fmt: skip
                    self.backend.stop(action.instance, force=action.force)
                else:
                    tail = self.backend.log_tail(action.instance)
                    log.warning("board %s %s; last lines:\n%s", action.instance.project,
                                action.reason, tail)  # fmt: skip
                    errors[action.instance.project] = f"board {action.reason}; last output:\n{tail}"
                    self.backend.forget(action.instance)
            except Exception as exc:
                project = (
                    action.spec.project if isinstance(action, Start) else action.instance.project
                )
                log.exception("action %r failed", action)
                errors[project] = f"{type(exc).__name__}: {exc}"

        list(self._pool.map(run, actions))
        return errors, started
