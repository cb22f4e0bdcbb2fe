"""Leader failover: from SIGKILL of the supervisor leader to the new leader's first pass.

Two `tbhub serve` replicas on one PostgreSQL database (a fresh one, dropped afterwards),
each with its own data dir, sharing the storage root, the board state dir and the secret
key. One board (project `bench`, 5 runs) is opened through the standby's nginx and keeps
running throughout. Then, per run:

- SIGKILL to the leader's `tbhub serve` PID alone (its nginx and the board stay up);
- poll the standby's /metrics through its nginx every 20 ms for `tbhub_supervisor_leader 1`
  (it holds the lock) and for `tbhub_reconcile_pass_seconds_count` growing (its first
  reconcile pass has finished: it observed, adopted the board and wrote what it saw);
- check the board was adopted: still one board, with the same instance id;
- start the killed replica again (a standby now) and wait until it answers; the roles swap
  for the next run.

Reported: every run's time to the lock and to the first pass, their medians and maxima,
and the board instances seen (1 means no board was ever started twice). Target: median
time to the first pass <= 10 s. The floor is TBHUB_LEADER_RETRY_SECONDS (1 s by default):
a standby tries for the lock that often, and PostgreSQL frees a SIGKILLed leader's lock as
soon as its socket closes.

    .venv/bin/python bench/leader_failover.py [--runs 5] [--warmup 1] [--json]

Needs nginx and a PostgreSQL server where it may create a database (TBHUB_TEST_POSTGRES_URL,
default postgresql+psycopg://postgres@127.0.0.1:5432/postgres). Uses ports 19000-19499 on
127.0.0.1 (TBHUB_BENCH_PORTS moves them).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from _processes import runs_listed, temp_dir, wait_for
from _reports import arguments, log, median, report
from _sample_data import copied_logdir
from _tbhub import Tbhub, database_url
from tbhub.core.processes import ProcessRef, stop_group

# prometheus-client writes every value as a float ("1.0").
LEADER = re.compile(r"^tbhub_supervisor_leader (\d)(?:\.0)?$", re.M)
PASSES = re.compile(r"^tbhub_reconcile_pass_seconds_count (\d+)(?:\.0)?$", re.M)
TARGET_S = 10.0


@dataclass
class Failover:
    to_lock_s: float
    to_first_pass_s: float
    instance_kept: bool


def leader_state(client: httpx.Client, replica: Tbhub) -> tuple[bool, int]:
    """(leads, reconcile passes so far) from the replica's /metrics."""
    try:
        body = client.get(f"{replica.base_url}/metrics").text
    except httpx.HTTPError:
        return False, -1
    leads, passes = LEADER.search(body), PASSES.search(body)
    return bool(leads and leads.group(1) == "1"), int(passes.group(1)) if passes else -1


def board_instances(state_dir: Path) -> set[str]:
    return {path.stem for path in state_dir.glob("*.json")}


def fail_over(client: httpx.Client, leader: Tbhub, standby: Tbhub, state_dir: Path) -> Failover:
    _, passes_before = leader_state(client, standby)
    instances_before = board_instances(state_dir)
    assert leader.server is not None
    killed = time.monotonic()
    leader.server.process.send_signal(signal.SIGKILL)
    to_lock: float | None = None
    while True:
        leads, passes = leader_state(client, standby)
        now = time.monotonic() - killed
        if leads and to_lock is None:
            to_lock = now
        if leads and passes > passes_before:
            break
        if now > 60:
            tail = standby.server.log_tail() if standby.server else ""
            raise TimeoutError(f"no new leader 60 s after the kill; its log ends:\n{tail}")
        time.sleep(0.02)
    leader.server.process.wait(timeout=10)
    assert to_lock is not None
    return Failover(to_lock, now, board_instances(state_dir) == instances_before)


def stop_all(replicas: list[Tbhub], state_dir: Path) -> None:
    for replica in replicas:
        with contextlib.suppress(Exception):
            replica.stop()
    for record in state_dir.glob("*.json"):  # boards neither replica stopped
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            state = json.loads(record.read_text())
            ref = ProcessRef(pid=int(state["pid"]), create_time=float(state["create_time"]))
            if ref.is_alive():
                stop_group(ref, grace=5.0, signals=(signal.SIGTERM, signal.SIGKILL))


def run(runs: int, warmup: int) -> dict[str, object]:
    with (
        temp_dir("tbhub-failover.") as work,
        database_url("postgresql") as db_url,
    ):
        storage, names = copied_logdir(work, runs=5, steps=200, tags=2)
        state_dir = work / "boards"
        env = {
            "TBHUB_DATABASE_URL": db_url,
            "TBHUB_BOARD_STATE_DIR": str(state_dir),
            "TBHUB_SECRET_KEY": secrets.token_hex(32),
        }
        replicas = [Tbhub(work / name, storage, extra_env=env) for name in ("a", "b")]
        try:
            for replica in replicas:
                replica.root.mkdir()
            replicas[0].set_up()
            for replica in replicas:
                replica.start()
            leader, standby = replicas
            cookie = leader.sign_in()
            results: list[Failover] = []
            with httpx.Client(timeout=5.0, cookies={"tbhub_session": cookie}) as client:
                client.headers["Accept"] = "application/json"
                wait_for(runs_listed(client, standby.board_url("data/runs"), names),
                         timeout=120, what="the board through the standby")  # fmt: skip
                for index in range(warmup + runs):
                    result = fail_over(client, leader, standby, state_dir)
                    measured = index >= warmup
                    label = f"run {index - warmup + 1}" if measured else f"warm-up {index + 1}"
                    log(f"{label}: lock after {result.to_lock_s:.2f}s, first pass after "
                        f"{result.to_first_pass_s:.2f}s, board kept: "
                        f"{result.instance_kept}")  # fmt: skip
                    if measured:
                        results.append(result)
                    leader.start()  # back as a standby
                    leader, standby = standby, leader
            first_pass = [r.to_first_pass_s for r in results]
            to_lock = [r.to_lock_s for r in results]
            return {
                "runs": [asdict(r) for r in results],
                "to_lock_median_s": median(to_lock),
                "to_lock_max_s": max(to_lock),
                "to_first_pass_median_s": median(first_pass),
                "to_first_pass_max_s": max(first_pass),
                "board_kept_every_time": all(r.instance_kept for r in results),
                "target_s": TARGET_S,
            }
        finally:
            stop_all(replicas, state_dir)


def main() -> None:
    args = arguments(__doc__, runs=5, warmup=1).parse_args()
    result = run(args.runs, args.warmup)
    report(result, as_json=args.json, text=(
        f"SIGKILL of the leader -> the standby holds the lock: median "
        f"{result['to_lock_median_s']:.2f}s, max {result['to_lock_max_s']:.2f}s\n"
        f"SIGKILL of the leader -> its first reconcile pass: median "
        f"{result['to_first_pass_median_s']:.2f}s, max {result['to_first_pass_max_s']:.2f}s "
        f"(target <= {TARGET_S:.0f}s); the board was adopted every time: "
        f"{result['board_kept_every_time']}"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
