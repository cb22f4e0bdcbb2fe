"""One wanted board's decisions: start, switch, drain, replace (memory, hung, spec, admin).

Part of the pure plan (supervisor/plan.py): no clock, file or process is read here."""

from __future__ import annotations

from tbhub.core.timestamps import iso_utc
from tbhub.supervisor.model import (
    Desired,
    Health,
    Instance,
    MemoryBackoff,
    MiB,
    Observed,
    Plan,
    Policy,
    Start,
    Stop,
)


def memory_backoff_seconds(level: int, maximum: float) -> float:
    """1, 2, 4 ... minutes, up to `maximum` seconds."""
    return float(min(60 * 2 ** max(level - 1, 0), maximum))


class BoardPlan:
    """The decisions for one wanted board; `decide` fills the shared Plan."""

    def __init__(
        self, want: Desired, instances: list[Instance], result: Plan, now: float, policy: Policy
    ) -> None:
        self.want = want
        self.instances = sorted(instances, key=lambda i: i.started_at)
        self.result = result
        self.now = now
        self.policy = policy
        self.note: str | None = None

    def health(self, instance: Instance) -> Health:
        return self.result.health[instance.instance_id]

    def ever_ready(self, instance: Instance) -> bool:
        return self.health(instance).ready_at is not None

    def hung(self, instance: Instance) -> bool:
        return self.ever_ready(instance) and (
            self.health(instance).probe_failures >= self.policy.hung_after
        )

    def usable(self, instance: Instance) -> bool:
        """Can take requests: ready once and not hung (a probe or two may fail in between)."""
        return self.ever_ready(instance) and not self.hung(instance) and bool(instance.upstream)

    def timed_out(self, instance: Instance) -> bool:
        return (
            not self.ever_ready(instance)
            and self.now - instance.started_at > self.policy.start_timeout
        )

    def current(self, instance: Instance) -> bool:
        return instance.fingerprint == self.want.spec.fingerprint

    def over_limit(self, instance: Instance) -> bool:
        return self.health(instance).over_limit >= self.policy.over_limit_after

    def replacement_likely(self, instance: Instance) -> bool:
        """Over its limit, or one missed probe short of hung: a coming pass may replace it.
        Answers pointing at it are not cached from now on, so that when the switch comes,
        readers move to the new board at once instead of when a cached answer expires. A
        single missed probe does not count: a board busy under load misses one now and then,
        and turning the cache off then would load the control plane when it can least
        afford it."""
        health, want = self.health(instance), self.want
        backing_off = want.memory_retry_at is not None and self.now < want.memory_retry_at
        almost_hung = health.probe_failures >= max(1, self.policy.hung_after - 1)
        return (health.over_limit > 0 and not backing_off) or almost_hung

    def replacement_reason(self, instance: Instance) -> str | None:
        """Why this instance must give way to a new one, if it must."""
        if not self.current(instance):
            return "spec"
        if self.hung(instance):
            return "hung"
        restart_after = self.want.restart_after
        if restart_after is not None and instance.started_at < restart_after:
            return "admin"
        if self.over_limit(instance) and self._memory_restart_allowed(instance):
            return "memory"
        return None

    def _memory_restart_allowed(self, instance: Instance) -> bool:
        """Over the limit: restart, unless that would only start a storm (then back off)."""
        want, policy = self.want, self.policy
        if want.memory_retry_at is not None and self.now < want.memory_retry_at:
            self.note = self._below_working_set_note(want.memory_retry_at)
            return False
        if self.now - instance.started_at < policy.memory_fresh:
            level = want.memory_backoffs + 1
            retry_at = self.now + memory_backoff_seconds(level, policy.memory_backoff_max)
            self.result.memory_backoff[want.project] = MemoryBackoff(level, retry_at)
            self.note = self._below_working_set_note(retry_at)
            return False
        return True

    def _below_working_set_note(self, retry_at: float) -> str:
        limit = (self.want.memory_limit or 0) / MiB
        until = iso_utc(retry_at)
        return (
            f"memory limit below what this board needs: it passed its {limit:.0f} MiB limit "
            f"soon after starting; no memory restart before {until}. Raise the project's "
            "memory limit."
        )

    def decide(self, *, crashed: str | None) -> Start | None:
        """Fill in actions and the observed state; return a cold start the budget must admit.

        `crashed`: an instance of the project ended in this pass, and why (crash, oom)."""
        want, result = self.want, self.result
        alive: list[Instance] = []
        timed_out = False
        for instance in self.instances:
            if self.timed_out(instance):
                stop = Stop(instance, f"not ready after {self.policy.start_timeout:.0f}s")
                result.actions.append(stop)
                result.failed.add(want.project)
                timed_out = True
            else:
                alive.append(instance)

        condemned = {i.instance_id: r for i in alive if (r := self.replacement_reason(i))}
        # A draining board is on its way out, even when the spec comes back to its own (a
        # plugin turned on, then off before the drain ended): chosen again, it would be the
        # newest usable one that is never switched to while it drains, and never stopped.
        leaving = want.draining.instance_id if want.draining is not None else None
        healthy = [i for i in alive if i.instance_id not in condemned and i.instance_id != leaving]
        newest_usable = next((i for i in reversed(healthy) if self.usable(i)), None)
        starting = [i for i in healthy if not self.ever_ready(i)]
        serving = self._choose_serving(alive, newest_usable)

        for instance in alive:
            if instance is serving or instance is newest_usable or instance in starting:
                continue
            if self.hung(instance) and newest_usable is None:
                continue  # the replacement starts first; then the hung group is killed
            self._retire(instance, condemned.get(instance.instance_id))
        if want.draining is not None and not any(
            i.instance_id == want.draining.instance_id for i in alive
        ):
            result.drains[want.project] = None  # the drained instance is gone

        needs_start = newest_usable is None and not starting and not timed_out
        backing_off = want.retry_at is not None and self.now < want.retry_at
        cold_start: Start | None = None
        if needs_start and not backing_off:
            start = Start(want.spec, reason=self._start_reason(condemned, crashed))
            if alive or self.policy.budget is None:
                result.actions.append(start)  # a replacement: the old board's memory goes
            else:
                cold_start = start
        replacing = bool(alive) and any(
            isinstance(a, Start) and a.spec.project == want.project for a in result.actions
        )
        swapping = (
            replacing
            or len(alive) > 1
            or (serving is not None and self.replacement_likely(serving))
        )
        self._observe(serving, alive, backing_off=backing_off, timed_out=timed_out,
                      swapping=swapping)  # fmt: skip
        if self.note is None and self._fresh_and_within_limit(serving):
            result.memory_backoff.setdefault(want.project, MemoryBackoff(0, None))
        return cold_start

    def _fresh_and_within_limit(self, serving: Instance | None) -> bool:
        """The board outlived its first minutes within the limit: forget earlier backoffs."""
        return (
            serving is not None
            and self.want.memory_backoffs > 0
            and self.health(serving).over_limit == 0
            and self.now - serving.started_at >= self.policy.memory_fresh
        )

    def _start_reason(self, condemned: dict[str, str], crashed: str | None) -> str | None:
        for reason in ("spec", "hung", "admin", "memory"):
            if reason in condemned.values():
                return reason
        if crashed is not None:
            return crashed
        return "crash" if self.want.failures > 0 else None

    def _choose_serving(
        self, alive: list[Instance], newest_usable: Instance | None
    ) -> Instance | None:
        """The instance the upstream points at after this pass."""
        want = self.want
        routed = next((i for i in alive if i.instance_id == want.serving), None)
        if routed is None or not self.usable(routed):
            routed = None
        if newest_usable is None:
            # Nothing better: keep serving from a condemned board while it still answers.
            usable = [i for i in alive if self.usable(i)]
            return routed or (usable[-1] if usable else None)
        if routed is None or routed is newest_usable:
            return newest_usable
        if want.draining is not None and want.draining.instance_id != routed.instance_id:
            return routed  # one drain at a time: switch again once the last one is over
        if self._caught_up(newest_usable, routed):
            return newest_usable
        self.result.catching_up.add(want.project)
        return routed

    def _caught_up(self, new: Instance, old: Instance) -> bool:
        """The new board lists every run the old one does, or it has had long enough."""
        if new.runs is not None and old.runs is not None and old.runs <= new.runs:
            return True
        ready_at = self.health(new).ready_at
        return ready_at is not None and self.now - ready_at >= self.policy.runs_wait

    def _retire(self, instance: Instance, reason: str | None) -> None:
        """Stop an instance that no longer serves; drain it first if it was the upstream."""
        want, policy, result = self.want, self.policy, self.result
        why = f"replaced ({reason})" if reason else "duplicate board for the project"
        if self.hung(instance):
            result.actions.append(Stop(instance, "replaced (hung)", force=True))
            return
        draining = want.draining
        if draining is not None and draining.instance_id == instance.instance_id:
            held = self.now - draining.since
            if held >= policy.drain_hold and (
                instance.active_requests == 0 or held >= policy.drain_max
            ):
                result.actions.append(Stop(instance, why))
            return
        if instance.instance_id == want.serving and self.usable(instance):
            result.drains[want.project] = instance.instance_id  # the switch happens now
            return
        result.actions.append(Stop(instance, why))

    def _observe(
        self,
        serving: Instance | None,
        alive: list[Instance],
        *,
        backing_off: bool,
        timed_out: bool,
        swapping: bool,
    ) -> None:
        want, result = self.want, self.result
        if serving is not None:
            observed = Observed(
                "ready",
                upstream=serving.upstream,
                instance_id=serving.instance_id,
                note=self.note,
                swapping=swapping,
            )
        elif timed_out and not alive:
            timeout = self.policy.start_timeout
            observed = Observed("failed", error=f"board not ready after {timeout:.0f}s")
        elif not alive and backing_off:
            observed = Observed("failed")
        else:
            hung = [i for i in alive if self.hung(i)]
            note = "the board stopped answering; a replacement is starting" if hung else None
            observed = Observed("starting", note=note)
        result.observed[want.project] = observed
