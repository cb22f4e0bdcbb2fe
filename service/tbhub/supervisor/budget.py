"""The memory budget and refused projects: the plan's decisions across boards.

Part of the pure plan (supervisor/plan.py): no clock, file or process is read here."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from tbhub.supervisor.model import Desired, Instance, MiB, Observed, Plan, Policy, Start, Stop


def refuse(want: Desired, instances: list[Instance], result: Plan) -> None:
    """A link leads out of the project (its board would show another project's data), or
    the board is refused for another reason (`want.refusal`): no board at all."""
    if want.unsafe_link is not None:
        reason = "a symlink leads outside the project"
        error = (
            f"not serving {want.project}: the symlink {want.unsafe_link} leads outside the "
            "project, and TensorBoard would show what it points to. Remove the link (or copy "
            "the data into the project)."
        )
    else:
        reason = "refused"
        error = f"not serving {want.project}: {want.refusal}"
    for instance in instances:
        result.actions.append(Stop(instance, reason, force=True))
    result.observed[want.project] = Observed("failed", error=error)


def degrade(want: Desired, instances: list[Instance], result: Plan) -> None:
    """The project's storage does not answer (a hung or dropped network mount): a new board
    would hang reading it as the old one does, so nothing starts and nothing is restarted,
    however its health probes fail: no restart storm. A board still serving keeps its route
    (it may answer from what it loaded); the state carries the reason as its note."""
    note = f"degraded: {want.storage_unavailable}"
    serving = next((i for i in instances if i.instance_id == want.serving and i.upstream), None)
    if serving is not None:
        result.observed[want.project] = Observed(
            "ready", upstream=serving.upstream, instance_id=serving.instance_id, note=note
        )
    else:
        error = f"not serving {want.project}: {want.storage_unavailable}"
        result.observed[want.project] = Observed("failed", error=error, note=note)


def typical_pss(measured: Sequence[int], estimate: int) -> int:
    """What a board not yet measured is taken to hold: the median of the boards measured,
    else the estimate."""
    return int(statistics.median(measured)) if measured else estimate


def starts_beside(running: Sequence[int | None], last_pss: int | None, budget: int | None,
                  estimate: int) -> bool:  # fmt: skip
    """Whether one more board would start within the budget beside the running boards
    (their PSS, None where not yet measured) with none of them evicted: costed as admit()
    costs a cold start (cold_start_cost)."""
    if budget is None:
        return True
    typical = typical_pss([pss for pss in running if pss], estimate)
    used = sum(pss or typical for pss in running)
    return used + cold_start_cost(last_pss, typical, budget) <= budget


def cold_start_cost(last_pss: int | None, typical: int, budget: int) -> int:
    """What a board starting cold is counted to hold: its own last PSS, else a typical
    board's, at most the whole budget (so with nothing else running it starts)."""
    return last_pss or min(typical, budget)


# The setting an operator raises when the budget is too small (docs/configuration.md).
BUDGET_SETTING = "TBHUB_BOARD_MEMORY_BUDGET"


def admit(
    cold_starts: list[tuple[Desired, Start]],
    desired: Mapping[str, Desired],
    by_project: Mapping[str, list[Instance]],
    result: Plan,
    now: float,
    policy: Policy,
) -> None:
    """Start cold boards within the memory budget, evicting least recently used idle boards.

    A board being replaced is not counted twice: only cold starts need room. A board never
    measured is costed at most the whole budget, so with nothing else running it starts."""
    if not cold_starts:
        return
    budget = policy.budget
    assert budget is not None
    live = [i for instances in by_project.values() for i in instances]

    def last_seen(instance: Instance) -> int | None:
        """PSS measured in this pass, else when last measured (not every pass measures)."""
        want = desired.get(instance.project)
        return instance.pss_bytes or (want.last_pss if want is not None else None)

    typical = typical_pss([pss for i in live if (pss := last_seen(i))], policy.board_estimate)

    def cost(want: Desired) -> int:
        return cold_start_cost(want.last_pss, typical, budget)

    def held(instance: Instance) -> int:
        return last_seen(instance) or typical

    used = sum(held(i) for i in live)
    # Boards already stopping (evicted by an earlier pass, stopped by hand or idle) free their
    # memory in a moment: wait for them rather than evict another board. The pass after an
    # eviction still sees the evicted board alive, and the boards it shared pages with have
    # grown, so without this one eviction would cascade into the next.
    stopping = {
        project: sum(held(i) for i in instances)
        for project, instances in by_project.items()
        if instances and not ((w := desired.get(project)) is not None and w.running)
    }
    freeing = sum(stopping.values())
    evictable = sorted(
        (
            w
            for w in desired.values()
            if w.running
            and not w.pinned
            and by_project.get(w.project)
            and (w.last_access or 0.0) < now - policy.reading_window
        ),
        key=lambda w: (w.last_access or 0.0, w.project),
    )
    freed_projects: set[str] = set()
    admitted: dict[str, int] = {}  # cold starts of this pass and what each was costed
    # Most recently asked-for first: they are the ones someone waits for.
    for want, start in sorted(
        cold_starts, key=lambda c: (-(c[0].last_access or 0.0), c[0].project)
    ):
        need = cost(want)
        if used + need <= budget:
            result.actions.append(start)
            admitted[want.project] = need
            used += need
            continue
        if freeing and used - freeing + need <= budget:
            used += need  # held for this board while the others stop
            result.observed[want.project] = replace(
                result.observed[want.project],
                note=f"waiting for memory: stopping {', '.join(sorted(stopping))}",
            )
            continue
        victims: list[Desired] = []
        room = used
        for candidate in evictable:
            if room + need <= budget:
                break
            if candidate.project in freed_projects or candidate.project == want.project:
                continue
            victims.append(candidate)
            room -= sum(held(i) for i in by_project[candidate.project])
        if room + need > budget:
            holders = {
                project: sum(held(i) for i in instances)
                for project, instances in by_project.items()
                if project not in freed_projects
            }
            holders.update(admitted)
            note = _no_capacity_note(
                need, used, budget, holders, desired, admitted, now - policy.reading_window
            )
            result.observed[want.project] = Observed("no_capacity", note=note)
            continue
        for victim in victims:
            freed_projects.add(victim.project)
            result.evicted.append(victim.project)
            result.observed[victim.project] = Observed("stopped")
            for instance in by_project[victim.project]:
                result.actions.append(Stop(instance, f"evicted to make room for {want.project}"))
        # The evicted boards stop during this pass; this one starts in the next.
        used = room
        result.observed[want.project] = replace(
            result.observed[want.project],
            note=f"waiting for memory: stopping {', '.join(v.project for v in victims)}",
        )


def _no_capacity_note(
    need: int,
    used: int,
    budget: int,
    holders: Mapping[str, int],
    desired: Mapping[str, Desired],
    admitted: Mapping[str, int],
    read_since: float,
) -> str:
    """Why a board cannot start: it alone is bigger than the budget, or the boards that hold
    the memory, each with why it stays (pinned, read, starting, stopping, idle)."""
    if need > budget:
        return (
            f"this board needs about {need / MiB:.0f} MiB (its last measured size), more than "
            f"the whole {budget / MiB:.0f} MiB board memory budget; raise {BUDGET_SETTING} "
            f"to at least {-(-need // MiB)} MiB"
        )

    def why(project: str) -> str:
        want = desired.get(project)
        if project in admitted:
            return "starting"
        if want is None or not want.running:
            return "stopping"
        if want.pinned:
            return "pinned"
        if (want.last_access or 0.0) >= read_since:
            return "being read"
        return "idle"

    held = ", ".join(
        f"{project} ({why(project)}, {size / MiB:.0f} MiB)"
        for project, size in sorted(holders.items(), key=lambda h: (-h[1], h[0]))
    )
    return (
        f"no capacity right now: boards use {used / MiB:.0f} MiB of the {budget / MiB:.0f} MiB "
        f"memory budget ({held}) and this board needs about {need / MiB:.0f} MiB; it starts "
        f"once enough of them stop, or raise {BUDGET_SETTING}"
    )
