"""Start and stop process groups we own, identified by PID and start time, never by name."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

DEFAULT_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def end_with_parent(parent: int) -> None:
    """In a child: be killed when the parent dies (Linux PR_SET_PDEATHSIG), and exit now if
    it already has. A parent killed with SIGKILL then leaves no child behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


@dataclass(frozen=True)
class ProcessRef:
    """A process we started: its PID (also its process-group and session id) and start time.

    The start time guards against PID reuse: a PID whose start time differs is somebody else.
    """

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ProcessRef:
        return cls(pid=pid, create_time=psutil.Process(pid).create_time())

    def leader(self) -> psutil.Process | None:
        try:
            process = psutil.Process(self.pid)
            if abs(process.create_time() - self.create_time) > 0.01:
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return process
        except psutil.NoSuchProcess:
            return None

    def is_alive(self) -> bool:
        return self.leader() is not None

    def group_members(self, label: tuple[str, str] | None = None) -> list[psutil.Process]:
        """Live processes in our group. Without a live leader, only those carrying `label`
        (an environment variable) count, so a recycled group id never reaches a stranger."""
        leader_alive = self.is_alive()
        members = []
        for process in psutil.process_iter():
            try:
                if os.getpgid(process.pid) != self.pid:
                    continue
                if process.status() == psutil.STATUS_ZOMBIE:
                    continue
                if not leader_alive and (
                    label is None or process.environ().get(label[0]) != label[1]
                ):
                    continue
                members.append(process)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return members


def stop_group(
    ref: ProcessRef,
    *,
    grace: float,
    label: tuple[str, str] | None = None,
    signals: Sequence[signal.Signals] = DEFAULT_STOP_SIGNALS,
) -> bool:
    """Signal the group with each signal in turn, waiting up to `grace` seconds after each.

    Returns True once nothing of the group is left.
    """
    for sig in signals:
        members = ref.group_members(label)
        if not members:
            return True
        if ref.is_alive():
            _signal_group(ref.pid, sig)
        else:
            for process in members:
                _signal_process(process, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not ref.group_members(label):
                return True
            time.sleep(0.05)
    return not ref.group_members(label)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _signal_process(process: psutil.Process, sig: signal.Signals) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        process.send_signal(sig)


def group_pss_bytes(ref: ProcessRef, label: tuple[str, str] | None = None) -> int:
    total = 0
    for process in ref.group_members(label):
        try:
            total += process.memory_full_info().pss
        except (psutil.Error, AttributeError):
            continue
    return total


def established_connections(ref: ProcessRef, port: int) -> int:
    """Connections the process serves on its listening `port` right now (requests in flight)."""
    leader = ref.leader()
    if leader is None:
        return 0
    try:
        connections = leader.net_connections(kind="tcp")
    except (psutil.Error, AttributeError):
        return 0
    return sum(
        1 for c in connections if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
    )
