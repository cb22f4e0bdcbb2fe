"""What the supervisor counts as it works (through core/metrics.py's instruments), and the
metric families /metrics reads from the boards table, the incidents and the outbox.

The instruments count from zero when the server starts, like any Prometheus counter; the
families read from the database survive a restart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tbhub.core.metrics import instruments


class Timing:
    """One of the instruments' histograms, and this process's own count and sum of it for
    the admin page ("N board starts since this server started")."""

    def __init__(self, histogram: Histogram) -> None:
        self._histogram = histogram
        self._lock = threading.Lock()
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self._histogram.observe(value)
        with self._lock:
            self.count += 1
            self.total += value


class SupervisorMetrics:
    """What the supervisor, the replica and the leader's duties count, through the
    instruments (core/metrics.py)."""

    def __init__(self) -> None:
        counted = instruments()
        self._instruments = counted
        self.start_latency = Timing(counted.board_start_seconds)
        self.reconcile_seconds = Timing(counted.reconcile_seconds)
        self._leader = False
        self._leader_changes = 0
        # The run-health monitor's figures while this replica runs it (serve/duties.py),
        # published after each reconcile pass.
        self.health_lines: Callable[[], list[tuple[str, float]]] | None = None
        self._published: dict[str, float] = {}
        counted.leader.set(0)

    # This replica runs the supervisor (replica.py), and how often that changed.
    @property
    def leader(self) -> bool:
        return self._leader

    @leader.setter
    def leader(self, value: bool) -> None:
        self._leader = value
        self._instruments.leader.set(int(value))

    @property
    def leader_changes(self) -> int:
        return self._leader_changes

    @leader_changes.setter
    def leader_changes(self, value: int) -> None:
        self._instruments.leader_changes.inc(max(0, value - self._leader_changes))
        self._leader_changes = value

    def count_pass(self, starts: Sequence[str | None], swaps: int) -> None:
        """One reconcile pass started these boards (each its restart reason, or None for a
        new board) and moved `swaps` upstreams to a replacement."""
        for reason in starts:
            self._instruments.board_starts.labels(reason or "new").inc()
        if swaps:
            self._instruments.board_swaps.inc(swaps)

    def publish_health(self) -> None:
        """Hand the monitor's figures to the instruments: counters by what they grew since
        the last time, gauges as they are (all at zero once the monitor stopped)."""
        figures = dict(self.health_lines()) if self.health_lines is not None else {}
        counted = self._instruments
        for name, counter in (("passes", counted.health_passes),
                              ("pass_seconds", counted.health_pass_seconds),
                              ("read_bytes", counted.health_read_bytes)):  # fmt: skip
            if name in figures:
                grown = figures[name] - self._published.get(name, 0.0)
                counter.inc(max(0.0, grown))
                self._published[name] = figures[name]
            else:
                self._published.pop(name, None)  # a new monitor counts from zero
        counted.health_runs_behind.set(figures.get("runs_behind", 0))
        counted.health_runs_followed.set(figures.get("runs_followed", 0))
        counted.health_lag.set(figures.get("lag_seconds", 0))


@dataclass(frozen=True)
class BoardRow:
    """What /metrics reports of one board (read from the boards table)."""

    project: str
    observed: str
    pss_bytes: int | None
    memory_limit: int | None
    restarts: dict[str, int]


def _gauge(
    name: str, text: str, samples: Iterable[tuple[Sequence[str], float]], labels: Sequence[str] = ()
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=list(labels))
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def incident_families(
    open_incidents: Sequence[tuple[str, str, int]], totals: Sequence[tuple[str, int]]
) -> list[Metric]:
    """Open incidents by project and detector, and every incident raised by detector."""
    return [
        _gauge("tbhub_incidents_open", "Open run-health incidents.",
               (((p, d), n) for p, d, n in open_incidents), ("project", "detector")),
        _gauge("tbhub_incidents", "Run-health incidents recorded, open or resolved, by detector.",
               (((d,), n) for d, n in totals), ("detector",)),
    ]  # fmt: skip


def notify_families(counts: dict[str, int], oldest: float | None) -> list[Metric]:
    """The notification outbox: deliveries by state, and how long the oldest has waited."""
    return [
        _gauge("tbhub_notify_deliveries", "Notifications in the outbox by state.",
               (((state,), n) for state, n in counts.items()), ("state",)),
        _gauge("tbhub_notify_oldest_pending_seconds",
               "Seconds the oldest notification still to send has waited.",
               [((), round(oldest, 3))] if oldest is not None else []),
    ]  # fmt: skip


def board_families(
    rows: Sequence[BoardRow], *, states: Sequence[str], reasons: Sequence[str], budget: int | None
) -> list[Metric]:
    """Boards by state, PSS and limit per board, restarts by reason, the memory budget."""
    ready = [r for r in rows if r.observed == "ready"]
    restarts = CounterMetricFamily("tbhub_board_restarts", "Board restarts by reason.",
                                   labels=["reason"])  # fmt: skip
    for reason in reasons:
        restarts.add_metric([reason], sum(r.restarts.get(reason, 0) for r in rows))
    return [
        _gauge("tbhub_boards", "Boards by observed state (no_capacity: the memory budget is full).",
               (((s,), sum(r.observed == s for r in rows)) for s in states), ("state",)),
        _gauge("tbhub_board_pss_bytes", "PSS of a ready board's processes when last measured.",
               (((r.project,), r.pss_bytes) for r in ready if r.pss_bytes is not None),
               ("project",)),
        _gauge("tbhub_board_memory_limit_bytes", "A board's memory limit (absent: none).",
               (((r.project,), r.memory_limit) for r in rows if r.memory_limit), ("project",)),
        restarts,
        _gauge("tbhub_board_memory_budget_bytes", "Sum of board PSS allowed on this host.",
               [((), budget)] if budget is not None else []),
        _gauge("tbhub_board_memory_used_bytes", "Sum of the PSS of ready boards.",
               [((), sum(r.pss_bytes or 0 for r in ready))]),
    ]  # fmt: skip
