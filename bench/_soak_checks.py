"""The soak's faults and its checks: memory leaks, board crashes and SIGKILL of the leader
replica; the control plane's RSS over time; every board process group the run started;
reading back every record written; backup verification; orphans after shutdown.

Processes are found by PID + start time (state files, the serve processes the soak
started) or by the soak's own work directory in their environment or command line, never
by name.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from sqlalchemy import select
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from _soak_load import TAGS, WrittenRun
from _tbhub import Tbhub
from tbhub.core.db import make_engine, make_session_factory
from tbhub.core.models import BackupRun
from tbhub.core.processes import ProcessRef, stop_group

LEADER = re.compile(r"^tbhub_supervisor_leader (\d)(?:\.0)?$", re.M)


# -- processes --------------------------------------------------------------------------------


def board_records(state_dir: Path) -> list[dict[str, object]]:
    records = []
    for path in sorted(state_dir.glob("*.json")):
        try:
            records.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return records


def ours(work: Path) -> list[ProcessRef]:
    """Every live process whose command line or environment names the soak's work dir."""
    mark = str(work)
    found = []
    for process in psutil.process_iter(["pid", "cmdline", "create_time"]):
        try:
            if process.pid == psutil.Process().pid:
                continue
            text = " ".join(process.info["cmdline"] or [])
            if mark not in text and not any(mark in v for v in process.environ().values()):
                continue
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            found.append(ProcessRef(process.pid, process.info["create_time"]))
        except psutil.Error:
            continue
    return found


@dataclass
class Watch:
    """Sampled every few seconds: board process groups seen, and each serve's RSS with the
    role it had then (leader or standby, from its /metrics)."""

    state_dir: Path
    replicas: list[Tbhub]
    started: float = field(default_factory=time.monotonic)
    groups: dict[int, ProcessRef] = field(default_factory=dict)
    # serve PID -> [(seconds since the soak started, role, RSS)]
    rss: dict[int, list[tuple[float, str, int]]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)  # the host's 1-minute load average

    def sample(self) -> None:
        self.load.append(os.getloadavg()[0])
        for record in board_records(self.state_dir):
            try:
                ref = ProcessRef(int(str(record["pid"])), float(str(record["create_time"])))
            except (KeyError, ValueError):
                continue
            self.groups.setdefault(ref.pid, ref)
        for replica in self.replicas:
            if not replica.alive() or replica.server is None:
                continue
            role = role_of(replica)
            try:
                rss = psutil.Process(replica.server.pid).memory_info().rss
            except psutil.Error:
                continue
            if role is not None:
                samples = self.rss.setdefault(replica.server.pid, [])
                samples.append((time.monotonic() - self.started, role, rss))

    def run(self, stop: threading.Event, every: float = 5.0) -> None:
        while not stop.wait(every):
            self.sample()

    def rss_growth(self, warmup: float) -> list[dict[str, Any]]:
        """Per serve process and stretch of one role (a standby that becomes the leader
        starts the supervisor, watcher, monitor and jobs: a new stretch) that lasted past
        `warmup` seconds: RSS at the first sample past the warm-up and at its last sample,
        in MiB, and the growth."""
        rows = []
        for pid, samples in self.rss.items():
            for role, stretch in role_stretches(samples):
                after = [s for s in stretch if s[0] - stretch[0][0] >= warmup]
                if len(after) < 2:
                    continue
                first, last = after[0][2], after[-1][2]
                rows.append({"pid": pid, "role": role, "warm_mib": first / 2**20,
                             "end_mib": last / 2**20, "growth": last / first - 1,
                             "minutes": (after[-1][0] - after[0][0]) / 60})  # fmt: skip
        return rows


def role_stretches(
    samples: list[tuple[float, str, int]],
) -> list[tuple[str, list[tuple[float, str, int]]]]:
    """Samples cut where the role changes, in order."""
    stretches: list[tuple[str, list[tuple[float, str, int]]]] = []
    for sample in samples:
        if not stretches or stretches[-1][0] != sample[1]:
            stretches.append((sample[1], []))
        stretches[-1][1].append(sample)
    return stretches


def role_of(replica: Tbhub) -> str | None:
    """The role the replica reports in /metrics (leader, standby), or None if it is silent."""
    try:
        found = LEADER.search(httpx.get(f"{replica.base_url}/metrics", timeout=3.0).text)
    except httpx.HTTPError:
        return None
    if found is None:
        return None
    return "leader" if found.group(1) == "1" else "standby"


# -- faults -----------------------------------------------------------------------------------


def leader_of(replicas: list[Tbhub]) -> Tbhub | None:
    return next((r for r in replicas if r.alive() and role_of(r) == "leader"), None)


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def kill_leader(replicas: list[Tbhub], down_seconds: float) -> str:
    """SIGKILL the leading `tbhub serve` (its nginx and boards stay, as in a crash), wait
    until another replica leads, leave it down `down_seconds`, then start it again."""
    wait_for(lambda: leader_of(replicas) is not None, 60, "a leader")
    leader = leader_of(replicas)
    assert leader is not None and leader.server is not None
    others = [r for r in replicas if r is not leader]
    leader.server.process.send_signal(signal.SIGKILL)
    leader.server.process.wait(timeout=10)
    killed = time.monotonic()
    wait_for(lambda: leader_of(others) is not None, 60, "another replica to lead")
    took = time.monotonic() - killed
    time.sleep(down_seconds)
    leader.start(timeout=120)
    return f"killed the leader (port {leader.http_port}); another led after {took:.1f}s"


def running_board(state_dir: Path) -> dict[str, object] | None:
    """A running board's state record, picked at random."""
    records = board_records(state_dir)
    return random.choice(records) if records else None


def leak(hub: Tbhub, cookie: str, state_dir: Path, mib: int) -> str:
    """Ask a running board (the leaky board) to keep `mib` MiB: past its limit, tbhub
    replaces it blue/green."""
    record = running_board(state_dir)
    if record is None:
        return "leak: no board running"
    project = record.get("project")
    with httpx.Client(timeout=60.0, cookies={"tbhub_session": cookie}) as client:
        url = f"{hub.base_url}/boards/{project}/data/environment"
        status = client.get(url, params={"tbhub_test_leak_mib": str(mib)}).status_code
    return f"leak: board {project} now holds {mib} MiB more (answered {status})"


def crash(state_dir: Path) -> str:
    """SIGKILL a running board's process group (PID + start time from its state file)."""
    record = running_board(state_dir)
    if record is None:
        return "crash: no board running"
    ref = ProcessRef(int(str(record["pid"])), float(str(record["create_time"])))
    stop_group(ref, grace=1.0, signals=(signal.SIGKILL,))
    return f"crash: SIGKILL to board {record.get('project')} (group {ref.pid})"


# -- end checks -------------------------------------------------------------------------------


def read_back(runs: list[WrittenRun]) -> dict[str, object]:
    """Read every event file of every written run with TensorBoard's loader; each step
    written must be there with all its tags."""
    written = read = 0
    missing: list[str] = []
    for run in runs:
        seen: dict[int, int] = {}
        for path in sorted(run.logdir.glob("events.out.tfevents.*")):
            for event in EventFileLoader(str(path)).Load():
                if event.HasField("summary"):
                    seen[event.step] = seen.get(event.step, 0) + len(event.summary.value)
        written += len(run.steps) * TAGS
        lost = [s for s in run.steps if seen.get(s, 0) < TAGS]
        read += (len(run.steps) - len(lost)) * TAGS
        if lost:
            missing.append(f"{run.logdir}: {len(lost)} steps missing, first {lost[:5]}")
    return {"records_written": written, "records_read_back": read, "missing": missing}


def backup_runs(url: str) -> dict[str, int]:
    """How many scheduled backups ran, by their end state (the database's record: snapshot
    retention keeps only the newest of each day on the target)."""
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            return dict(Counter(session.scalars(select(BackupRun.state))))
    finally:
        engine.dispose()


def verify_backups(hub: Tbhub) -> dict[str, object]:
    """`tbhub admin backup list`, then `verify` of every complete snapshot."""
    listed = json.loads(hub.cli("admin", "backup", "list", "--json"))
    snapshots = listed.get("snapshots", listed) if isinstance(listed, dict) else listed
    names = [str(s["name"]) for s in snapshots if s.get("complete", True)]
    failures = []
    for name in names:
        try:
            hub.cli("admin", "backup", "verify", name, "--json")
        except RuntimeError as exc:
            failures.append(f"{name}: {str(exc)[-300:]}")
    return {"snapshots": len(names), "verified": len(names) - len(failures), "failures": failures}


def orphans(watch: Watch, work: Path, before: set[tuple[int, float]]) -> list[str]:
    """After shutdown: every board group the run saw must be gone, and no process started
    since the soak began may still name its work dir."""
    left = [f"board group {ref.pid}" for ref in watch.groups.values() if ref.is_alive()]
    for ref in ours(work):
        if (ref.pid, ref.create_time) not in before:
            try:
                cmd = " ".join(psutil.Process(ref.pid).cmdline())[:120]
            except psutil.Error:
                continue
            left.append(f"pid {ref.pid}: {cmd}")
    return sorted(set(left))


def reap(watch: Watch, work: Path) -> None:
    """Stop whatever the checks found left (after they have counted it)."""
    for ref in [*watch.groups.values(), *ours(work)]:
        if ref.is_alive():
            stop_group(ref, grace=2.0, signals=(signal.SIGTERM, signal.SIGKILL))
