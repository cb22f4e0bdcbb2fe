"""A soak test: a day of use compressed into `--duration` seconds, with faults, then checks.

Two `tbhub serve` replicas on one fresh PostgreSQL database (one with `--db sqlite`), each
with its own nginx, sharing the storage root, the board state dir and the secret key,
behind a load balancer modelled in the client (round robin over the replicas whose
/healthz answers). `--projects` projects, each owned by one of `--users` users, with two
seeded runs; a few also hold a run last written 60 days ago, for retention to remove.

- readers: each user signed in, opening their boards through nginx with a board page's
  XHR pattern (environment, runs, plugins listing, scalar tags, every run x tag series),
  reloading a few times, then moving to another board;
- writers: each registers a run through the API (a write token), appends a step of two
  scalars every 0.5 s with TensorBoard's event writer (flushed every second; each flushed
  step recorded), and the second of every four runs writes 200 steps locally and sends them with
  `tbhub upload --finish`;
- faults, spread over the time after the warm-up: SIGKILL of the leader replica (another
  leads; the killed one starts again as a standby; PostgreSQL only), forced memory leaks
  (every board is bench/leaky_board.py, a real TensorBoard that keeps the MiB a request
  asks for, so it passes TBHUB_BOARD_MEMORY_LIMIT and is replaced blue/green), and SIGKILL
  of a board's process group (the supervisor restarts it);
- retention (max age 30 days) and backups (to a local target) on a short schedule.

At the end the replicas are stopped (SIGTERM) and it checks, each a target:
user-visible 5xx = 0 (a 503 with Retry-After is retried, not counted; a request that
reached the killed replica is retried on the other, as a load balancer does, and counted
as a failover), every record written read back (TensorBoard's EventFileLoader), every
backup snapshot verifies (`tbhub admin backup verify`), no orphan (every board process
group seen is gone, and no process started since the soak began names its work dir), the
faults, retention and backups happened, and the control plane's RSS (each `tbhub serve`
from /proc) grew at most 10% from the end of its warm-up to its last sample (only for runs
of 10 minutes or more: a shorter run has no warm-up to speak of). The warm-up counts from
the start of each stretch of one role: a standby that becomes the leader loads and starts
the leader's duties (supervisor, watcher, monitor, jobs), so its RSS is compared from the
end of a new warm-up as leader, not across the change of role.

    .venv/bin/python bench/soak.py [--duration 1800] [--projects 50] [--users 20]
        [--writers 10] [--db postgresql|sqlite] [--json]

Exits 1 when a target fails. Needs nginx and PostgreSQL (TBHUB_TEST_POSTGRES_URL); ports
from TBHUB_BENCH_PORTS (default 19000-19499).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import psutil

from _processes import temp_dir
from _reports import arguments, at_least, emit_json, log
from _soak_checks import (
    Watch,
    backup_runs,
    crash,
    kill_leader,
    leak,
    orphans,
    read_back,
    reap,
    verify_backups,
)
from _soak_load import Balancer, Tally, Writing, read_boards, threads_of, write_runs
from _tbhub import Tbhub, database_url
from tbhub.auth.tokens import create_token
from tbhub.core.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.core.models import TokenScope
from tbhub.domain.projects import create_project
from tbhub.domain.users import create_user, get_user
from tbhub.storage.sample_logs import write_project, write_run

LEAKY_BOARD = Path(__file__).with_name("leaky_board.py")
PASSWORD = "soak-password-not-secret"
ADMIN = "soak-admin"
MEMORY_LIMIT, LEAK_MIB = "400MiB", 600
RSS_TARGET = 0.10
OLD_DAYS = 60
STOP_GRACE = 300.0  # SIGTERM to a serve, then SIGKILL: it stops every board first


def seed(url: str, storage: Path, projects: int, users: int, writers: int) -> dict[str, Any]:
    """Users, projects (two runs each; every tenth one also an old run) and write tokens."""
    upgrade(url)
    engine = make_engine(url)
    names = [f"p{i:02d}" for i in range(projects)]
    people = [f"u{i:02d}" for i in range(users)]
    old = []
    try:
        with transaction(make_session_factory(engine)) as session:
            create_user(session, name=ADMIN, password=PASSWORD, is_admin=True, actor="soak")
            for person in people:
                create_user(session, name=person, password=PASSWORD, is_admin=False,
                            actor="soak")  # fmt: skip
            for index, name in enumerate(names):
                create_project(session, name=name, storage_root=storage,
                               owner=people[index % users], actor="soak")  # fmt: skip
            tokens = [
                create_token(session, user=get_user(session, name=ADMIN), name=f"writer-{w}",
                             scope=TokenScope("write"), projects=names, expires_at=None,
                             actor="soak")[1]
                for w in range(writers)
            ]  # fmt: skip
    finally:
        engine.dispose()
    for index, name in enumerate(names):
        write_project(storage / name, runs=2, steps=50, tags=2)
        if index % 10 == 0:
            run = storage / name / "old-00"
            write_run(run, steps=20, tags=1)
            then = time.time() - OLD_DAYS * 86400
            for path in [*run.iterdir(), run]:
                os.utime(path, (then, then))
            old.append(run)
    reads = {p: [n for i, n in enumerate(names) if i % users == j] or [names[j % projects]]
             for j, p in enumerate(people)}  # fmt: skip
    return {"tokens": tokens, "reads": reads, "projects": names, "old_runs": old}


def settings(work: Path, db_url: str, duration: float) -> dict[str, str]:
    leaky = work / "leaky-tensorboard"
    leaky.write_text(f"#!{sys.executable}\n{LEAKY_BOARD.read_text()}")
    leaky.chmod(0o755)
    every_hours = max(60.0, duration / 6) / 3600
    return {
        "TBHUB_DATABASE_URL": db_url,
        "TBHUB_BOARD_STATE_DIR": str(work / "boards"),
        "TBHUB_SECRET_KEY": secrets.token_hex(32),
        "TBHUB_TENSORBOARD_BIN": str(leaky),
        "TBHUB_BOARD_MEMORY_LIMIT": MEMORY_LIMIT,
        "TBHUB_BOARD_MEMORY_FRESH_SECONDS": "1",
        "TBHUB_RECONCILE_INTERVAL": "2",
        "TBHUB_BACKUP_TARGET": str(work / "backups"),
        "TBHUB_BACKUP_INTERVAL_HOURS": f"{every_hours:.6f}",
        "TBHUB_RETENTION_INTERVAL_HOURS": f"{every_hours:.6f}",
        "TBHUB_RETENTION_MAX_AGE_DAYS": "30",
    }


def fault_plan(duration: float, warmup: float, replicas: int) -> list[tuple[float, str]]:
    """(seconds from the start, fault): leader kills, leaks and crashes spread evenly over
    the time between the warm-up and 75% of the run, a leader kill first."""
    kills = max(1, int(duration // 900)) if replicas > 1 else 0
    each = max(1, int(duration // 300))
    kinds = ["leader"] * kills + [k for _ in range(each) for k in ("leak", "crash")]
    kinds.sort(key=lambda k: 0 if k == "leader" else 1)
    # interleave: a leader kill, then leaks and crashes, the other kills spread among them
    order = [k for k in kinds if k != "leader"]
    step = max(1, len(order) // max(1, kills))
    for n in range(kills):
        order.insert(n * (step + 1), "leader")
    span = duration * 0.75 - warmup
    return [(warmup + span * i / max(1, len(order) - 1), k) for i, k in enumerate(order)]


def keep_logs(replicas: list[Tbhub], into: Path) -> None:
    """Copy each replica's serve log and nginx error log into `into` (the work dir goes)."""
    for replica in replicas:
        where = into / replica.root.name
        where.mkdir(parents=True, exist_ok=True)
        for log_file in [replica.root / "serve.log",
                         replica.data_dir / "nginx" / "logs" / "nginx-error.log"]:  # fmt: skip
            if log_file.exists():
                shutil.copy(log_file, where / log_file.name)


def log_counts(replicas: list[Tbhub]) -> dict[str, int]:
    text = "".join((r.root / "serve.log").read_text(errors="replace") for r in replicas)
    return {
        "memory_restarts": text.count("(reason: memory)"),
        "crash_restarts": text.count("(reason: crash)"),
        "retention_passes": text.count("retention: {"),
        "backup_failures": text.count("backup failed"),
        "reconcile_failures": text.count("reconcile pass failed"),
        "deadlocks": text.count("psycopg.errors.DeadlockDetected: deadlock detected")
        + text.count("board accesses: (psycopg.errors.DeadlockDetected)"),
    }


def run(args: Any) -> dict[str, Any]:
    duration = float(args.duration)
    warmup = min(300.0, duration * 0.2)
    started_at = time.time()
    before = {(p.pid, p.create_time()) for p in psutil.process_iter()}
    with temp_dir("soak-") as work, database_url(args.db) as db_url:
        storage = work / "storage"
        storage.mkdir()
        env = settings(work, db_url, duration)
        count = 2 if args.db == "postgresql" else 1
        replicas = [Tbhub(work / name, storage, extra_env=env) for name in "ab"[:count]]
        watch = Watch(work / "boards", replicas)
        tally, writing, stop = Tally(), Writing(), threading.Event()
        events: list[str] = []
        stops: list[float] = []  # seconds each replica took to stop on SIGTERM
        balancer: Balancer | None = None
        threads: list[threading.Thread] = []
        try:
            seeded = seed(db_url, storage, args.projects, args.users, args.writers)
            for replica in replicas:
                replica.root.mkdir()
                replica.start(timeout=120)
            admin = replicas[0].sign_in(ADMIN, PASSWORD)
            balancer = Balancer(replicas)
            # one at a time: a sign-in hashes a password, a second of CPU on a small host
            cookies = {u: replicas[0].sign_in(u, PASSWORD) for u in seeded["reads"]}
            threads = threads_of([
                *[(lambda u=u, ps=ps: read_boards(
                    cookies[u], ps, balancer, tally, stop, seed=int(u[1:])))
                  for u, ps in seeded["reads"].items()],
                *[(lambda w=w, t=t: write_runs(
                    w, t, seeded["projects"], storage, balancer, tally, writing, stop, work,
                    run_seconds=max(40.0, duration / 6), upload_every=4))
                  for w, t in enumerate(seeded["tokens"])],
                lambda: watch.run(stop),
            ], "soak")  # fmt: skip
            t0 = time.monotonic()
            log(f"soak: {args.projects} projects, {args.users} users, {args.writers} writers, "
                f"{duration:.0f}s, {count} replica(s) on {args.db}")  # fmt: skip
            for at, kind in fault_plan(duration, warmup, count):
                stop.wait(max(0.0, t0 + at - time.monotonic()))
                if kind == "leader":
                    what = kill_leader(replicas, down_seconds=10.0)
                elif kind == "leak":
                    what = leak(balancer.pick(), admin, work / "boards", LEAK_MIB)
                else:
                    what = crash(work / "boards")
                events.append(f"{time.monotonic() - t0:6.0f}s {what}")
                log(f"soak: {events[-1]}")
            stop.wait(max(0.0, t0 + duration - time.monotonic()))
            watch.sample()
        finally:
            stop.set()
            for thread in threads:
                thread.join(60)
            if balancer is not None:
                balancer.close()
            for replica in replicas:  # the last to stop stops the boards
                began = time.monotonic()
                with contextlib.suppress(Exception):
                    if replica.server is not None and replica.alive():
                        replica.server.stop(sig=signal.SIGTERM, grace=STOP_GRACE)
                stops.append(round(time.monotonic() - began, 1))
            left = orphans(watch, work, before)
            reap(watch, work)
            if args.keep_logs:
                keep_logs(replicas, Path(args.keep_logs))
        readback = read_back(writing.runs)
        backups = {**verify_backups(replicas[0]), "runs": backup_runs(db_url)}
        counts = log_counts(replicas)
        old_left = [str(p) for p in seeded["old_runs"] if p.exists()]
        rss = watch.rss_growth(warmup)
    served = sum(tally.statuses.values())
    result: dict[str, Any] = {
        "duration_s": duration, "warmup_s": warmup, "db": args.db, "replicas": count,
        "projects": args.projects, "users": args.users, "writers": args.writers,
        "requests_served": served, "statuses": dict(sorted(tally.statuses.items())),
        "starting_503_retried": tally.starting_503, "failovers": tally.failovers,
        "user_visible_5xx": len(tally.user_visible), "user_visible": tally.user_visible[:20],
        "runs_written": len(writing.runs), "registrations": writing.registrations,
        "uploads": writing.uploads, **readback, "backups": backups, **counts,
        "old_runs_left": old_left, "faults": events, "rss": rss, "orphans": left,
        "stop_seconds": stops, "stop_grace_s": STOP_GRACE,
        "load_average": os.getloadavg(), "cpus": os.cpu_count(),
        "load_average_mean": sum(watch.load) / max(1, len(watch.load)),
        "load_average_max": max(watch.load, default=0.0),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_at)),
    }  # fmt: skip
    result["failed_targets"] = failed_targets(result, check_rss=duration >= 600)
    return result


def failed_targets(r: dict[str, Any], *, check_rss: bool) -> list[str]:
    failed = []
    if r["user_visible_5xx"]:
        failed.append(f"{r['user_visible_5xx']} user-visible 5xx or errors")
    if r["missing"] or not r["records_written"]:
        failed.append("records written but not read back (or none written)")
    if not r["backups"]["snapshots"] or r["backups"]["failures"]:
        failed.append("no backup snapshot, or one that does not verify")
    if r["orphans"]:
        failed.append(f"{len(r['orphans'])} orphan processes")
    if not r["retention_passes"] or r["old_runs_left"]:
        failed.append("retention did not run, or left a run older than its max age")
    if not r["memory_restarts"] or not r["crash_restarts"]:
        failed.append("no memory restart or no crash restart in the serve logs")
    if r["replicas"] > 1 and not any("killed the leader" in f for f in r["faults"]):
        failed.append("the leader was never killed")
    if not r["uploads"] or not r["registrations"]:
        failed.append("no upload or no registration went through")
    if check_rss and (not r["rss"] or any(row["growth"] > RSS_TARGET for row in r["rss"])):
        failed.append(f"control-plane RSS grew more than {RSS_TARGET:.0%} after warm-up")
    return failed


def text_report(r: dict[str, Any]) -> str:
    rss = "; ".join(f"serve {row['pid']} as {row['role']}: {row['warm_mib']:.0f} -> "
                    f"{row['end_mib']:.0f} MiB "
                    f"({row['growth']:+.1%} over {row['minutes']:.0f} min)"
                    for row in r["rss"]) or "no serve process ran past its warm-up"  # fmt: skip
    lines = [
        f"soak {r['duration_s']:.0f}s on {r['db']} ({r['replicas']} replicas), "
        f"{r['projects']} projects, {r['users']} users, {r['writers']} writers; host load "
        f"average (1 min) mean {r['load_average_mean']:.2f}, max {r['load_average_max']:.2f} "
        f"on {r['cpus']} CPUs",
        f"requests served: {r['requests_served']} {r['statuses']}; 503 + Retry-After retried: "
        f"{r['starting_503_retried']}; failovers to the other replica: {r['failovers']}",
        f"user-visible 5xx: {r['user_visible_5xx']} (target 0) {r['user_visible'][:5]}",
        f"records written: {r['records_written']}, read back: {r['records_read_back']} "
        f"({r['runs_written']} runs: {r['registrations']} registered, {r['uploads']} uploaded)",
        f"backups: {r['backups']['runs']} runs; {r['backups']['snapshots']} snapshots kept, "
        f"{r['backups']['verified']} verify; "
        f"retention passes: {r['retention_passes']}, old runs left: {len(r['old_runs_left'])}",
        f"restarts: memory {r['memory_restarts']}, crash {r['crash_restarts']}; reconcile "
        f"passes failed: {r['reconcile_failures']} (deadlocks: {r['deadlocks']})",
        f"control-plane RSS after warm-up -> end: {rss} (target <= {RSS_TARGET:.0%})",
        f"orphans: {len(r['orphans'])} {r['orphans'][:5]}; SIGTERM to stopped: "
        f"{r['stop_seconds']} s (SIGKILL after {r['stop_grace_s']:.0f} s)",
        *[f"  fault at {f}" for f in r["faults"]],
        "targets: " + ("all met" if not r["failed_targets"] else "; ".join(r["failed_targets"])),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--duration", type=at_least(60), default=1800, help="seconds")
    parser.add_argument("--projects", type=at_least(1), default=50)
    parser.add_argument("--users", type=at_least(1), default=20)
    parser.add_argument("--writers", type=at_least(1), default=10)
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--keep-logs", help="copy the replicas' logs into this directory")
    args = parser.parse_args()

    def stop_cleanly(signum: int, _frame: types.FrameType | None) -> None:
        raise SystemExit(128 + signum)  # the finally blocks stop everything started

    signal.signal(signal.SIGTERM, stop_cleanly)
    result = run(args)
    if args.json:
        emit_json(result)
    else:
        print(text_report(result))
    sys.exit(1 if result["failed_targets"] else 0)


if __name__ == "__main__":
    main()
