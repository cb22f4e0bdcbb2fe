"""The soak test's smoke version: bench/soak.py itself, for 3 minutes, on a small installation.

Two replicas on a fresh PostgreSQL database, 6 projects, 4 signed-in users reading boards
through nginx with a board page's XHR pattern, 3 writers (registrations through the API,
scalars with TensorBoard's event writer, `tbhub upload`), one SIGKILL of the leader
replica, one forced memory leak (a blue/green restart), one SIGKILL of a board's process
group, retention and backups on a short schedule. Its report must meet the soak's
targets: no user-visible 5xx, every record written read back, every backup snapshot
verifies, no orphan process, and each fault, retention pass and backup happened.

The control plane's RSS growth is reported but not asserted here: 3 minutes leave no
warm-up to measure growth from; `make soak` (30 minutes) asserts it.

The soak runs in its own session; if it overruns, SIGTERM makes it stop everything it
started (its own cleanup), and SIGKILL to its group follows if that hangs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tbhub.core.processes import ProcessRef, stop_group
from tests.ports import _SLICE

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"
ARGS = ["--duration", "180", "--projects", "6", "--users", "4", "--writers", "3", "--json"]


def run_soak(tmp_path: Path) -> dict[str, object]:
    env_ports = f"{_SLICE.start}-{_SLICE.stop - 1}"  # this worker's ports
    log = tmp_path / "soak.log"
    with open(log, "wb") as stderr:
        soak = subprocess.Popen(
            [sys.executable, str(SOAK), *ARGS], stdout=subprocess.PIPE, stderr=stderr,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "TBHUB_BENCH_PORTS": env_ports},
        )  # fmt: skip
    try:
        out, _ = soak.communicate(timeout=1200)
    finally:
        if soak.poll() is None:
            stop_group(ProcessRef.of(soak.pid), grace=400, signals=(signal.SIGTERM, signal.SIGKILL))
            soak.wait(timeout=10)
    print(log.read_text(errors="replace"))  # shown on failure
    assert out, f"the soak printed no report (exit {soak.returncode})"
    report: dict[str, object] = json.loads(out)
    return report


def test_a_three_minute_soak_meets_its_targets(tmp_path: Path) -> None:
    report = run_soak(tmp_path)
    print(json.dumps(report, indent=2))
    assert report["user_visible_5xx"] == 0, report["user_visible"]
    assert report["requests_served"], "the readers were served"
    assert report["records_written"], "the writers wrote records"
    assert report["records_read_back"] == report["records_written"], report["missing"]
    backups = report["backups"]
    assert isinstance(backups, dict)
    assert backups["snapshots"] and backups["verified"] == backups["snapshots"], backups
    assert report["orphans"] == []
    faults = report["faults"]
    assert isinstance(faults, list)
    assert any("killed the leader" in f for f in faults), faults
    assert report["memory_restarts"], "the forced leak restarted a board"
    assert report["crash_restarts"], "the killed board was restarted"
    assert report["retention_passes"] and report["old_runs_left"] == [], "retention ran"
    assert report["uploads"] and report["registrations"]
    assert report["deadlocks"] == 0, "no reconcile pass deadlocked with a standby"
    assert report["failed_targets"] == []
