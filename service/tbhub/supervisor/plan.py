"""The pure heart of the supervisor: compare what should run with what runs, list the fixes.

`plan` reads no clock, file or process; the loop observes and applies. Every action is safe
to repeat, so a pass that dies half-way is finished by the next one. Every decision (crash,
start timeout, memory limit, hung board, blue/green switch and drain, memory budget,
unsafe links, storage that does not answer) is made here or in the two modules it calls
(board_plan.py, budget.py), so tests/test_plan.py can state each one as a row of a table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tbhub.supervisor.board_plan import BoardPlan, memory_backoff_seconds
from tbhub.supervisor.budget import admit, degrade, refuse
from tbhub.supervisor.model import (
    Action,
    BoardSpec,
    Desired,
    Drain,
    Forget,
    Health,
    Instance,
    MemoryBackoff,
    MiB,
    Observed,
    Plan,
    Policy,
    Start,
    Stop,
    board_prefix,
)

__all__ = ["Action", "BoardSpec", "Desired", "Drain", "Forget", "Health", "Instance",
           "MemoryBackoff", "MiB", "Observed", "Plan", "Policy", "Start", "Stop",
           "board_prefix", "memory_backoff_seconds", "plan"]  # fmt: skip


def plan(
    desired: Mapping[str, Desired],
    actual: Sequence[Instance],
    *,
    now: float,
    policy: Policy,
    health: Mapping[str, Health] | None = None,
) -> Plan:
    result = Plan()
    previous = health or {}
    by_project: dict[str, list[Instance]] = {}
    crashed: dict[str, str] = {}  # project -> restart reason: crash, or oom
    for instance in actual:
        if not instance.alive:
            oom = instance.exit_reason == "oom"
            result.actions.append(Forget(instance, "killed at its memory limit" if oom
                                         else "process exited"))  # fmt: skip
            want = desired.get(instance.project)
            if want is not None and want.running:
                result.failed.add(instance.project)
                if crashed.get(instance.project) != "oom":
                    crashed[instance.project] = "oom" if oom else "crash"
            continue
        result.health[instance.instance_id] = _next_health(
            instance, previous.get(instance.instance_id, Health()), desired, now
        )
        by_project.setdefault(instance.project, []).append(instance)

    for project, instances in by_project.items():
        want = desired.get(project)
        if want is None or not want.running:
            reason = "project deleted" if want is None else "board not wanted"
            result.actions.extend(Stop(i, reason) for i in instances)
            if want is not None and want.draining is not None:
                result.drains[project] = None

    cold_starts: list[tuple[Desired, Start]] = []
    for project, want in desired.items():
        if not want.running:
            result.observed[project] = Observed("stopped")
            continue
        if want.unsafe_link is not None or want.refusal is not None:
            refuse(want, by_project.get(project, []), result)
            continue
        if want.storage_unavailable is not None:
            degrade(want, by_project.get(project, []), result)
            continue
        board = BoardPlan(want, by_project.get(project, []), result, now, policy)
        start = board.decide(crashed=crashed.get(project))
        if start is not None:
            cold_starts.append((want, start))
    admit(cold_starts, desired, by_project, result, now, policy)
    return result


def _next_health(
    instance: Instance, old: Health, desired: Mapping[str, Desired], now: float
) -> Health:
    ready_at = old.ready_at if old.ready_at is not None else (now if instance.ready else None)
    if not instance.probed:
        failures = old.probe_failures
    elif instance.ready or ready_at is None:
        failures = 0
    else:
        failures = old.probe_failures + 1
    want = desired.get(instance.project)
    limit = want.memory_limit if want is not None else None
    if instance.pss_bytes is None or not limit:
        over = old.over_limit if instance.pss_bytes is None and limit else 0
    else:
        over = old.over_limit + 1 if instance.pss_bytes > limit else 0
    return Health(ready_at=ready_at, probe_failures=failures, over_limit=over)
