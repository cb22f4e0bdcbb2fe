"""Histograms the supervisor fills as it works and /metrics prints (Prometheus text format).

They live in the memory of the serving process, like any Prometheus histogram: a restart
starts them again from zero.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class Histogram:
    buckets: Sequence[float]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        with self.lock:
            for index, bound in enumerate(self.buckets):
                if value <= bound:
                    self.counts[index] += 1
            self.total += value
            self.count += 1

    def lines(self, name: str, help_text: str) -> list[str]:
        with self.lock:
            out = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
            for bound, count in zip(self.buckets, self.counts, strict=True):
                out.append(f'{name}_bucket{{le="{bound:g}"}} {count}')
            out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
            out.append(f"{name}_sum {self.total:.6f}")
            out.append(f"{name}_count {self.count}")
        return out


@dataclass
class SupervisorMetrics:
    start_latency: Histogram = field(
        default_factory=lambda: Histogram((0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120))
    )
    reconcile_seconds: Histogram = field(
        default_factory=lambda: Histogram((0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))
    )

    # This replica runs the supervisor (replica.py), and how often that changed.
    leader: bool = False
    leader_changes: int = 0
    # The run-health monitor's lines while this replica runs it (serve/duties.py).
    health_lines: Callable[[], list[str]] | None = None

    def lines(self) -> list[str]:
        return [
            *_family("tbhub_supervisor_leader", "gauge",
                     "1 if this replica runs the supervisor and the jobs, 0 on a standby.",
                     [("", int(self.leader))]),
            *_family("tbhub_supervisor_leader_changes_total", "counter",
                     "Times this replica became the leader or stopped being it.",
                     [("", self.leader_changes)]),
            *self.start_latency.lines(
                "tbhub_board_start_seconds",
                "Seconds from a board's start to its first ready probe.",
            ),
            *self.reconcile_seconds.lines(
                "tbhub_reconcile_pass_seconds", "Wall time of one supervisor reconcile pass."
            ),
            *(self.health_lines() if self.health_lines is not None else []),
        ]  # fmt: skip


@dataclass(frozen=True)
class BoardRow:
    """What /metrics reports of one board (read from the boards table)."""

    project: str
    observed: str
    pss_bytes: int | None
    memory_limit: int | None
    restarts: dict[str, int]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _family(name: str, kind: str, help_text: str, samples: list[tuple[str, object]]) -> list[str]:
    """One metric family: HELP, TYPE, then `name{labels} value` per sample."""
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
            *(f"{name}{labels} {value}" for labels, value in samples)]  # fmt: skip


def incident_lines(
    open_incidents: Sequence[tuple[str, str, int]], totals: Sequence[tuple[str, int]]
) -> list[str]:
    """Open incidents by project and detector, and every incident raised by detector."""
    return [
        *_family("tbhub_incidents_open", "gauge", "Open run-health incidents.",
                 [(f'{{project="{_label(p)}",detector="{_label(d)}"}}', n)
                  for p, d, n in open_incidents]),
        *_family("tbhub_incidents", "gauge",
                 "Run-health incidents recorded, open or resolved, by detector.",
                 [(f'{{detector="{_label(d)}"}}', n) for d, n in totals]),
    ]  # fmt: skip


def notify_lines(counts: dict[str, int], oldest: float | None) -> list[str]:
    """The notification outbox: deliveries by state, and how long the oldest has waited."""
    return [
        *_family("tbhub_notify_deliveries", "gauge", "Notifications in the outbox by state.",
                 [(f'{{state="{_label(state)}"}}', n) for state, n in counts.items()]),
        *_family("tbhub_notify_oldest_pending_seconds", "gauge",
                 "Seconds the oldest notification still to send has waited.",
                 [("", round(oldest, 3))] if oldest is not None else []),
    ]  # fmt: skip


def board_lines(
    rows: Sequence[BoardRow], *, states: Sequence[str], reasons: Sequence[str], budget: int | None
) -> list[str]:
    """Boards by state, PSS and limit per board, restarts by reason, the memory budget."""
    ready = [r for r in rows if r.observed == "ready"]
    return [
        *_family("tbhub_boards", "gauge",
                 "Boards by observed state (no_capacity: the memory budget is full).",
                 [(f'{{state="{s}"}}', sum(r.observed == s for r in rows)) for s in states]),
        *_family("tbhub_board_pss_bytes", "gauge",
                 "PSS of a ready board's processes when last measured.",
                 [(f'{{project="{_label(r.project)}"}}', r.pss_bytes)
                  for r in ready if r.pss_bytes is not None]),
        *_family("tbhub_board_memory_limit_bytes", "gauge",
                 "A board's memory limit (absent: none).",
                 [(f'{{project="{_label(r.project)}"}}', r.memory_limit)
                  for r in rows if r.memory_limit]),
        *_family("tbhub_board_restarts_total", "counter", "Board restarts by reason.",
                 [(f'{{reason="{reason}"}}', sum(r.restarts.get(reason, 0) for r in rows))
                  for reason in reasons]),
        *_family("tbhub_board_memory_budget_bytes", "gauge",
                 "Sum of board PSS allowed on this host.",
                 [("", budget)] if budget is not None else []),
        *_family("tbhub_board_memory_used_bytes", "gauge", "Sum of the PSS of ready boards.",
                 [("", sum(r.pss_bytes or 0 for r in ready))]),
    ]  # fmt: skip
