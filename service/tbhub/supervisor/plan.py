"""The pure heart of the supervisor: compare what should run with what runs, list the fixes.

`plan` reads no clock, file or process; the loop observes and applies. Every action is safe
to repeat, so a pass that dies half-way is finished by the next one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field


def board_prefix(project: str) -> str:
    """The path every request for a project's board starts with (TensorBoard --path_prefix)."""
    return f"/boards/{project}"


@dataclass(frozen=True)
class BoardSpec:
    """Everything that shapes a board process; a change means a new process (blue/green)."""

    project: str
    logdir: str
    path_prefix: str
    reload_interval: int = 30
    extra_args: tuple[str, ...] = ()

    @property
    def fingerprint(self) -> str:
        raw = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Desired:
    spec: BoardSpec
    running: bool
    # After a crash or failed start, no new start before this time (exponential backoff).
    retry_at: float | None = None

    @property
    def project(self) -> str:
        return self.spec.project


@dataclass(frozen=True)
class Instance:
    """One board process (or container) as the backend sees it."""

    instance_id: str
    project: str
    fingerprint: str
    started_at: float
    alive: bool
    upstream: str | None = None
    ready: bool = False


@dataclass(frozen=True)
class Start:
    spec: BoardSpec


@dataclass(frozen=True)
class Stop:
    instance: Instance
    reason: str


@dataclass(frozen=True)
class Forget:
    """The process is gone; drop what the backend remembers of it."""

    instance: Instance
    reason: str


Action = Start | Stop | Forget


@dataclass(frozen=True)
class Observed:
    """What the database should say about one project's board after this pass."""

    state: str  # one of models.ObservedState
    upstream: str | None = None
    instance_id: str | None = None
    error: str | None = None


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    observed: dict[str, Observed] = field(default_factory=dict)
    # Wanted boards that crashed or did not get ready in time during this pass.
    failed: set[str] = field(default_factory=set)


def plan(
    desired: Mapping[str, Desired],
    actual: Sequence[Instance],
    *,
    now: float,
    start_timeout: float,
) -> Plan:
    result = Plan()
    by_project: dict[str, list[Instance]] = {}
    for instance in actual:
        if not instance.alive:
            result.actions.append(Forget(instance, "process exited"))
            want = desired.get(instance.project)
            if want is not None and want.running:
                result.failed.add(instance.project)
            continue
        by_project.setdefault(instance.project, []).append(instance)

    for project, instances in by_project.items():
        want = desired.get(project)
        if want is None or not want.running:
            reason = "project deleted" if want is None else "board not wanted"
            result.actions.extend(Stop(i, reason) for i in instances)

    for project, want in desired.items():
        if not want.running:
            result.observed[project] = Observed("stopped")
            continue
        instances = by_project.get(project, [])
        result.actions.extend(_converge(want, instances, now, start_timeout))
        result.observed[project] = _observe(want, instances, now, start_timeout)
        if any(_timed_out(i, now, start_timeout) for i in instances):
            result.failed.add(project)
    return result


def _is_current(instance: Instance, want: Desired) -> bool:
    return instance.fingerprint == want.spec.fingerprint


def _timed_out(instance: Instance, now: float, start_timeout: float) -> bool:
    return not instance.ready and now - instance.started_at > start_timeout


def _backing_off(want: Desired, now: float) -> bool:
    return want.retry_at is not None and now < want.retry_at


def _converge(
    want: Desired, instances: list[Instance], now: float, start_timeout: float
) -> list[Action]:
    actions: list[Action] = []
    current = [
        i for i in instances if _is_current(i, want) and not _timed_out(i, now, start_timeout)
    ]
    ready = sorted((i for i in current if i.ready), key=lambda i: i.started_at, reverse=True)
    # Keep the newest ready current instance, else the newest starting one.
    keep = ready[0] if ready else max(current, key=lambda i: i.started_at, default=None)
    for instance in instances:
        if instance is keep:
            continue
        if _timed_out(instance, now, start_timeout) and _is_current(instance, want):
            actions.append(Stop(instance, f"not ready after {start_timeout:.0f}s"))
        elif not _is_current(instance, want):
            # Blue/green: the old board serves until its replacement is ready.
            if keep is not None and keep.ready:
                actions.append(Stop(instance, "replaced by a board with a new spec"))
        else:
            actions.append(Stop(instance, "duplicate board for the project"))
    timed_out = any(_timed_out(i, now, start_timeout) for i in instances)
    if keep is None and not timed_out and not _backing_off(want, now):
        actions.append(Start(want.spec))
    return actions


def _observe(
    want: Desired, instances: list[Instance], now: float, start_timeout: float
) -> Observed:
    serving = [i for i in instances if i.ready and i.upstream]
    if serving:
        best = max(serving, key=lambda i: (_is_current(i, want), i.started_at))
        return Observed("ready", upstream=best.upstream, instance_id=best.instance_id)
    if any(_timed_out(i, now, start_timeout) for i in instances):
        return Observed("failed", error=f"board not ready after {start_timeout:.0f}s")
    if not instances and _backing_off(want, now):
        return Observed("failed")
    return Observed("starting")
