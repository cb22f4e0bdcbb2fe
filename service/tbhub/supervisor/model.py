"""What the pure plan reads and returns: specs, desired state, instances, health, actions.

Plain frozen dataclasses, so plan() and its table tests need nothing else."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

MiB = 1024 * 1024


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
    # TensorBoard's --samples_per_plugin, e.g. "scalars=500,images=0"; "" keeps its default.
    samples_per_plugin: str = ""
    # Plugins that are off by default and that this project opted back into.
    plugins: tuple[str, ...] = ()
    # A container's hard (cgroup) memory limit in bytes; None: the backend sets none.
    memory_limit: int | None = None

    @property
    def fingerprint(self) -> str:
        # Unset optional fields stay out, so adding one does not restart every board.
        fields = {k: v for k, v in asdict(self).items() if v is not None}
        raw = json.dumps(fields, sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class Drain:
    """An instance that served until `since` (Unix time) and now only finishes its requests."""

    instance_id: str
    since: float


@dataclass(frozen=True)
class Desired:
    spec: BoardSpec
    running: bool
    # After a crash or failed start, no new start before this time (exponential backoff).
    retry_at: float | None = None
    failures: int = 0
    memory_limit: int | None = None  # bytes of PSS; None: no limit
    pinned: bool = False
    last_access: float | None = None
    # The instance the database routes to now, and the one still draining, if any.
    serving: str | None = None
    draining: Drain | None = None
    # A limit below the board's working set: no memory restart before this time.
    memory_backoffs: int = 0
    memory_retry_at: float | None = None
    # PSS the project's board had when last seen: what starting it again will cost.
    last_pss: int | None = None
    # An operator asked for a restart at this time: older instances are replaced.
    restart_after: float | None = None
    # A symlink in the project that leads out of it (storage/links.py): no board at all.
    unsafe_link: str | None = None
    # Any other reason the board must not run (a compare view that cannot be built): no
    # board at all, and this is the error shown.
    refusal: str | None = None
    # The project's storage did not answer the supervisor's check (a hung or dropped network
    # mount): the board is degraded, never started or restarted until the storage answers.
    storage_unavailable: str | None = None

    @property
    def project(self) -> str:
        return self.spec.project


@dataclass(frozen=True)
class Instance:
    """One board process (or container) as the backend sees it, plus this pass's probes."""

    instance_id: str
    project: str
    fingerprint: str
    started_at: float
    alive: bool
    upstream: str | None = None
    ready: bool = False  # its health probe answered in this pass
    pss_bytes: int | None = None  # None: not measured in this pass
    active_requests: int = 0
    runs: frozenset[str] | None = None  # what /data/runs listed, when asked
    probed: bool = True  # False: not probed in this pass (a fast pass skips settled boards)
    # Why an instance that is no longer alive ended, when the backend knows: "oom" (the
    # kernel killed it at its cgroup memory limit). None: a plain exit or crash.
    exit_reason: str | None = None


@dataclass(frozen=True)
class Health:
    """What one instance's earlier passes showed; the loop carries it from pass to pass.

    These are observations, not pending decisions: a restarted supervisor counts again from
    zero, which only delays a replacement by a few passes."""

    ready_at: float | None = None
    probe_failures: int = 0  # failed health probes in a row since it was first ready
    over_limit: int = 0  # observations in a row with PSS over the memory limit


BOARD_ESTIMATE = 128 * MiB  # PSS of a board never seen before, with no board measured


@dataclass(frozen=True)
class Policy:
    start_timeout: float
    hung_after: int = 3  # failed probes in a row that make a ready board "hung"
    over_limit_after: int = 2  # observations in a row over the memory limit
    # After the upstream switches away from an instance, it serves this long (the board
    # snapshot's age plus nginx's cached auth answers), then until its requests are done.
    drain_hold: float = 7.0
    drain_max: float = 300.0
    # A replacement takes over once it lists the old board's runs, or after this long.
    runs_wait: float = 30.0
    # A board over its limit this soon after starting needs more than the limit allows.
    memory_fresh: float = 300.0
    memory_backoff_max: float = 3600.0
    budget: int | None = None  # sum of board PSS allowed on this host; None: no budget
    reading_window: float = 120.0  # accessed this recently: someone reads it, never evicted
    board_estimate: int = BOARD_ESTIMATE


@dataclass(frozen=True)
class Start:
    spec: BoardSpec
    # Why an earlier board of the project is being replaced: memory, crash, hung, spec.
    reason: str | None = None


@dataclass(frozen=True)
class Stop:
    instance: Instance
    reason: str
    force: bool = False  # SIGKILL at once: the board no longer answers anything


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
    note: str | None = None  # a standing condition to show with the status (None clears it)
    swapping: bool = False  # a second instance starts or drains: routes may change soon


@dataclass(frozen=True)
class MemoryBackoff:
    level: int
    retry_at: float | None


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    observed: dict[str, Observed] = field(default_factory=dict)
    # Wanted boards that crashed or did not get ready in time during this pass.
    failed: set[str] = field(default_factory=set)
    health: dict[str, Health] = field(default_factory=dict)
    # project -> instance that stops serving now (recorded with the time of the switch),
    # or None once the drain is over.
    drains: dict[str, str | None] = field(default_factory=dict)
    memory_backoff: dict[str, MemoryBackoff] = field(default_factory=dict)
    # Projects whose boards stop to make room within the memory budget.
    evicted: list[str] = field(default_factory=list)
    # Projects whose replacement is ready but does not list the old board's runs yet.
    catching_up: set[str] = field(default_factory=set)
