"""The contract every board backend keeps (DESIGN.md, decision 2).

Backends get specs and hand back `Instance`s; they never see a database session. Instances
carry labels (a state file and environment, or container labels) so that a restarted
supervisor adopts the boards still alive and reaps the ones it does not know.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Protocol

from tbhub.supervisor.plan import BoardSpec, Instance


class Backend(Protocol):
    def start(self, spec: BoardSpec) -> Instance:
        """Launch a board and return at once; readiness is observed later."""
        ...

    def stop(self, instance: Instance, *, force: bool = False) -> None:
        """Stop it: SIGINT, then SIGTERM, then SIGKILL, each after a bounded wait.

        `force`: SIGKILL at once (a hung board answers no signal it could catch)."""
        ...

    def list_instances(self, only: Set[str] | None = None) -> list[Instance]:
        """Every instance this backend started and still remembers, alive or not; with
        `only`, those of these instance ids alone, the others not looked at.

        An instance that is no longer alive says why in `exit_reason` when the backend
        knows (`oom`: killed by the kernel at its cgroup memory limit)."""
        ...

    def forget(self, instance: Instance) -> None:
        """Drop the labels of an instance that has exited."""
        ...

    def memory_bytes(self, instance: Instance) -> int:
        """Proportional set size (PSS) of the instance: shared pages split, not double-counted."""
        ...

    def active_requests(self, instance: Instance) -> int:
        """Requests the instance is serving right now (open connections to its port)."""
        ...

    def reap_unknown(self) -> list[str]:
        """Stop instances that carry this installation's label but that no state knows of."""
        ...

    def log_tail(self, instance: Instance, lines: int = 20) -> str:
        """The last lines the board printed, to explain a failure."""
        ...

    def close(self) -> None:
        """Let go of helpers (a zygote, a daemon connection); boards keep running."""
        ...
