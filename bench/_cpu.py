"""CPU time of the parties to a request (the board, nginx, `tbhub serve`, docker's port
proxy, the load generator), so a benchmark can say where a request's CPU goes: each
party's user + system seconds, summed over its processes, between two snapshots."""

from __future__ import annotations

import contextlib
import json
import resource
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# The load generator's share: the CPU of this process's waited-for children.
CHILDREN = "wrk"


def _seconds(times: object) -> float:
    return float(getattr(times, "user", 0.0) + getattr(times, "system", 0.0))


def tree(pid: int) -> list[psutil.Process]:
    """A process and its descendants now; [] if it is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def state_file_pids(paths: Iterable[Path]) -> list[int]:
    """The `pid` of each of tbhub's state files (a board's, nginx's master) that has one."""
    pids = []
    for path in paths:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            pids.append(int(json.loads(path.read_text())["pid"]))
    return pids


def listening_proxies(port: int) -> list[int]:
    """docker's userland proxies that publish host `port` (none with the proxy turned off)."""
    found = []
    for process in psutil.process_iter(["name", "cmdline"]):
        command = process.info.get("cmdline") or []
        if process.info.get("name") == "docker-proxy" and str(port) in command:
            found.append(process.pid)
    return found


@dataclass
class Parties:
    """Named groups of processes; `snapshot()` reads each group's CPU seconds. A group in
    `trees` counts its processes' descendants too; one in `alone` only the processes."""

    trees: dict[str, list[int]] = field(default_factory=dict)
    alone: dict[str, list[int]] = field(default_factory=dict)

    def snapshot(self) -> dict[str, float]:
        seconds: dict[str, float] = {}
        groups = {name: {p for pid in pids for p in tree(pid)} for name, pids in self.trees.items()}
        for name, pids in self.alone.items():
            groups[name] = {p for pid in pids for p in tree(pid)[:1]}
        for name, processes in groups.items():
            total = 0.0
            for process in processes:
                with contextlib.suppress(psutil.Error):
                    total += _seconds(process.cpu_times())
            seconds[name] = total
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds[CHILDREN] = usage.ru_utime + usage.ru_stime
        return seconds

    @contextlib.contextmanager
    def measured(self, into: dict[str, float]) -> Iterator[None]:
        """CPU seconds each party used inside the block, written into `into`."""
        before = self.snapshot()
        yield
        after = self.snapshot()
        into.update({name: round(after[name] - before.get(name, 0.0), 3) for name in after})
