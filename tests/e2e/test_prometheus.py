"""The shipped monitoring against a real Prometheus: it scrapes a running tbhub through nginx,
the rules and config pass promtool, every dashboard query is valid PromQL over what tbhub
exports, and each alert rule fires when the test causes its condition for real."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until
from tests.e2e.healing import board_row
from tests.e2e.prometheus import MONITORING, PROMTOOL, RULES, Prometheus, running_prometheus
from tests.e2e.test_boards import wait_for_board

DASHBOARD = MONITORING / "tbhub-dashboard.json"


def value(prometheus: Prometheus, expr: str) -> float | None:
    result = prometheus.query(expr)
    return float(result[0]["value"][1]) if result else None


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Callable[[TbhubServer], Prometheus]]:
    """Start a Prometheus scraping the given server (one per test)."""
    stack = ExitStack()

    def start(server: TbhubServer) -> Prometheus:
        target = f"127.0.0.1:{server.http_port}"
        prometheus = stack.enter_context(running_prometheus(tmp_path / "prometheus", target))
        prometheus.wait_scraped()
        return prometheus

    with stack:
        yield start


@pytest.fixture
def watched(
    make_server: Callable[..., TbhubServer],
    prometheus_for: Callable[[TbhubServer], Prometheus],
) -> Callable[..., tuple[TbhubServer, Prometheus]]:
    """alice's server with project vision (its board ready, with `board`), and a Prometheus
    scraping it."""

    def start(*, board: bool) -> tuple[TbhubServer, Prometheus]:
        server = make_server().start_with_alice()
        if board:
            wait_for_board(server.sign_in("alice", "alice-password"), "vision")
        return server, prometheus_for(server)

    return start


def test_promtool_passes_the_shipped_rules_and_config() -> None:
    for args in (["check", "rules", str(RULES)],
                 ["check", "config", str(MONITORING / "prometheus.yml")]):  # fmt: skip
        checked = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (
        "SUCCESS: 4 rules found"
        in subprocess.run(
            [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
        ).stdout
    )


def test_prometheus_scrapes_tbhub_and_every_dashboard_query_runs(
    watched: Callable[..., tuple[TbhubServer, Prometheus]],
) -> None:
    server, prometheus = watched(board=True)
    alice = server.sign_in("alice", "alice-password")
    for _ in range(3):  # the hook's caches answer the repeats
        assert alice.get("/boards/vision/data/runs").status_code == 200

    def scraped_hook() -> float | None:
        return value(prometheus, 'tbhub_http_request_duration_seconds_count{route="/_auth/board"}')

    wait_until(scraped_hook, timeout=20, what="the auth hook's requests in Prometheus")
    assert value(prometheus, 'sum(tbhub_auth_cache_lookups_total{cache="access",result="hit"})')
    assert value(prometheus, 'tbhub_board_starts_total{reason="new"}') == 1
    assert value(prometheus, 'tbhub_boards{state="ready"}') == 1
    assert value(prometheus, "tbhub_supervisor_leader") == 1
    assert (value(prometheus, "tbhub_storage_capacity_bytes") or 0) > 0
    panels = json.loads(DASHBOARD.read_text())["panels"]
    for panel in panels:
        for target in panel["targets"]:
            prometheus.query(target["expr"].replace("$job", ".*"))  # asserts success
    # A rule evaluated in the first seconds (no leader elected yet) clears on the next one.
    wait_until(lambda: prometheus.alerts() == [], timeout=15, what="no alert on a healthy tbhub")


def test_leader_missing_fires_when_the_leader_stops(
    watched: Callable[..., tuple[TbhubServer, Prometheus]],
) -> None:
    server, prometheus = watched(board=False)
    wait_until(lambda: value(prometheus, "tbhub_supervisor_leader") == 1, timeout=20,
               what="the leader in Prometheus")  # fmt: skip
    wait_until(lambda: prometheus.firing("TbhubLeaderMissing") is None, timeout=15,
               what="no leader alert while the leader runs")  # fmt: skip
    server.stop()
    prometheus.wait_firing("TbhubLeaderMissing", timeout=30)


def test_board_restart_storm_fires_when_a_board_restarts_again_and_again(
    watched: Callable[..., tuple[TbhubServer, Prometheus]],
) -> None:
    server, prometheus = watched(board=True)
    alice = server.sign_in("alice", "alice-password")
    for count in range(1, 6):
        serving = board_row(server).instance_id
        assert alice.post("/api/v1/projects/vision/board/restart").status_code == 202

        def replaced(n: int = count, old: str | None = serving) -> bool:
            row = board_row(server)
            return row.restarts.get("admin") == n and row.instance_id not in (None, old)

        # Each replacement serves before the next restart: one swap each.
        wait_until(replaced, timeout=60, what=f"restart {count} to serve")
    alert = prometheus.wait_firing("TbhubBoardRestartStorm", timeout=30)
    assert alert["labels"]["reason"] == "admin"
    wait_until(lambda: value(prometheus, "tbhub_board_swaps_total") == 5, timeout=20,
               what="five swaps in Prometheus")  # fmt: skip
    assert value(prometheus, 'tbhub_board_starts_total{reason="admin"}') == 5


def test_backup_older_than_the_rpo_fires_once_the_snapshot_ages(
    make_server: Callable[..., TbhubServer],
    prometheus_for: Callable[[TbhubServer], Prometheus],
) -> None:
    server = make_server()
    server.env["TBHUB_BACKUP_TARGET"] = str(server.data_dir.parent / "backups")
    server.env["TBHUB_BACKUP_AFTER_CHANGE_SECONDS"] = "1"
    server.env["TBHUB_BACKUP_RPO_HOURS"] = "0.002"  # 7.2 s
    project = server.add_project("vision")
    server.start()
    prometheus = prometheus_for(server)
    assert value(prometheus, "tbhub_backup_rpo_seconds") == pytest.approx(7.2)
    write_run(project / "run-00", steps=10, tags=1)
    wait_until(lambda: value(prometheus, "tbhub_backup_last_run_success") == 1, timeout=60,
               what="a complete backup in Prometheus")  # fmt: skip
    assert prometheus.firing("TbhubBackupOlderThanRpo") is None, "the snapshot is fresh"
    prometheus.wait_firing("TbhubBackupOlderThanRpo", timeout=40)


def test_storage_nearly_full_fires_when_the_storage_root_fills(
    make_server: Callable[..., TbhubServer],
    prometheus_for: Callable[[TbhubServer], Prometheus],
    tmp_path: Path,
) -> None:
    mount = tmp_path / "small-storage"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                             capture_output=True, text=True)  # fmt: skip
    assert mounted.returncode == 0, f"a 16 MiB tmpfs for the storage root: {mounted.stderr}"
    server: TbhubServer | None = None
    try:
        server = make_server(storage_root=str(mount))
        server.storage = mount
        server.add_project("vision")
        server.start()
        prometheus = prometheus_for(server)
        free = "tbhub_storage_free_bytes / tbhub_storage_capacity_bytes"
        assert (value(prometheus, free) or 0) > 0.5
        assert prometheus.firing("TbhubStorageNearlyFull") is None
        with open(mount / "filler", "wb") as filler:
            filler.write(b"\0" * (15 * 1024 * 1024 + 512 * 1024))  # 15.5 of 16 MiB
        alert = prometheus.wait_firing("TbhubStorageNearlyFull", timeout=30)
        assert float(alert["value"]) < 0.05
    finally:
        if server is not None:
            server.stop()  # before the unmount: the server holds the storage root open
        subprocess.run(["umount", str(mount)], check=False)
