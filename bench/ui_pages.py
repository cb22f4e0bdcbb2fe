"""Server time of the web UI's pages: the projects page, and a project page with 10,000 runs
(newest first, filtered, sorted, the last page), p50/p99, on SQLite and PostgreSQL.

A real `tbhub serve` (nginx, control plane, supervisor, watcher); its database is seeded
directly with `--projects` projects owned by the bench user, one of them (`bench`) holding
`--runs` runs with hyperparameters, metrics, tags and statuses, the others 20 runs each.
Each page is fetched `--requests` times in a row by one signed-in client (after a warm-up),
through nginx. The figure is the server time the control plane reports in its
`Server-Timing: app;dur=` header (request in to response start: auth, queries, rendering);
the time the client saw through nginx is reported beside it. The anchor, measured in the
same run the same way, is `GET /api/v1/projects/bench/runs?limit=50`: the API's JSON of the
same 50 runs the project page shows first. Target: p99 < 200 ms.

Also reported: a run's sparkline (`…/sparkline.svg`) for a run with real event files
(1,000 steps), first read and read again (cached, nothing new to read).

    python bench/ui_pages.py [--requests 300] [--runs 10000] [--databases sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import functools
import random
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import Connection, create_engine, insert, select

from _places import PROJECT, USER
from _processes import temp_dir
from _reports import arguments, emit_json, log, percentile
from _tbhub import hub_on_database, on_databases
from tbhub.core.models import Board, Membership, Project, Role, Run, RunTag, User
from tbhub.storage.sample_logs import write_run

TIMING = re.compile(r"app;dur=([0-9.]+)")
STATUSES = ["running", "finished", "finished", "finished", "failed", "killed", "discovered"]


def add_projects(db: Connection, storage: Path, count: int, now: datetime) -> list[str]:
    """`count` projects `team-NNN` owned by the bench user, their boards stopped."""
    user_id = db.scalar(select(User.id).where(User.name == USER))
    names = [f"team-{i:03d}" for i in range(count)]
    for name in names:
        project_id = db.execute(insert(Project).values(name=name, created_at=now)
                                .returning(Project.id)).scalar_one()  # fmt: skip
        db.execute(insert(Board).values(project_id=project_id, desired_state="stopped",
                                        desired_at=now, observed_state="stopped",
                                        restarts={}))  # fmt: skip
        db.execute(insert(Membership).values(user_id=user_id, project_id=project_id,
                                             role=Role.owner))  # fmt: skip
        (storage / name).mkdir(parents=True, exist_ok=True)
    return names


def seed(url: str, storage: Path, *, runs: int, projects: int) -> int:
    """Projects owned by the bench user and their runs, straight into the database; returns
    the id of the one run given real event files (for the sparkline figure)."""
    engine = create_engine(url)
    rng = random.Random(7)
    now = datetime.now(UTC)
    try:
        with engine.begin() as db:
            names = add_projects(db, storage, projects - 1, now)
            ids = dict(db.execute(select(Project.name, Project.id)).all())
            rows = []
            for name, count in [(PROJECT, runs), *((n, 20) for n in names)]:
                for i in range(count):
                    group = f"ablation-{i % 9}"
                    rows.append({
                        "project_id": ids[name], "path": f"{group}/20261201-{i:06d}-run",
                        "name": f"run-{i}", "group_name": group,
                        "status": rng.choice(STATUSES), "source": "api",
                        "retention_state": "present",
                        "hparams": {"lr": rng.choice([1e-4, 3e-4, 1e-3]), "batch": 64,
                                    "optimizer": rng.choice(["adam", "sgd"])},
                        "metrics": {"val_loss": rng.random(), "accuracy": rng.random()},
                        "git_commit": f"{rng.getrandbits(160):040x}", "git_dirty": False,
                        "host": f"gpu-{i % 16:02d}", "created_by": USER,
                        "created_at": now - timedelta(minutes=count - i), "updated_at": now,
                        "last_write": now - timedelta(seconds=rng.randint(0, 10**6)),
                        "bytes": rng.randint(10**5, 10**9), "files": 3,
                    })  # fmt: skip
            for start in range(0, len(rows), 5000):
                db.execute(insert(Run), rows[start : start + 5000])
            run_ids = db.scalars(select(Run.id).where(Run.project_id == ids[PROJECT])).all()
            db.execute(insert(RunTag), [{"run_id": r, "tag": f"sweep-{r % 5}"} for r in run_ids])
            first = select(Run.id, Run.path).where(Run.project_id == ids[PROJECT]).limit(1)
            sample_id, sample_path = db.execute(first).one()
            write_run(storage / PROJECT / sample_path, steps=1000, tags=2)
            return int(sample_id)
    finally:
        engine.dispose()


def timed(client: httpx.Client, url: str, count: int) -> dict[str, float]:
    """p50/p99 of the server time (Server-Timing) and of the time the client saw, in ms."""
    server, seen = [], []
    for _ in range(count):
        started = time.perf_counter()
        response = client.get(url)
        seen.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"GET {url}: {response.status_code} {response.text[:300]}")
        match = TIMING.search(response.headers.get("server-timing", ""))
        if match is None:
            raise RuntimeError(f"GET {url}: no Server-Timing header")
        server.append(float(match.group(1)))
    return {
        "server_p50_ms": percentile(server, 0.50),
        "server_p99_ms": percentile(server, 0.99),
        "client_p50_ms": percentile(seen, 0.50),
        "client_p99_ms": percentile(seen, 0.99),
    }


def measure(database: str, url: str, args: argparse.Namespace) -> dict[str, object]:
    with temp_dir("tbhub-bench-ui-") as root:
        hub = hub_on_database(root, url)
        sample_id = 0

        def seed_database() -> None:
            nonlocal sample_id
            log(f"{database}: seeding {args.projects} projects, {args.runs} runs in {PROJECT} ...")
            sample_id = seed(url, root / "storage", runs=args.runs, projects=args.projects)

        with hub.serving(prepare=seed_database):
            client = httpx.Client(base_url=hub.base_url, timeout=30.0,
                                  cookies={"tbhub_session": hub.sign_in()})  # fmt: skip
            pages: dict[str, str] = {
                "projects page": "/",
                "project page (newest 50)": f"/projects/{PROJECT}",
                "project page (status filter)": f"/projects/{PROJECT}?status=running",
                "project page (by size)": f"/projects/{PROJECT}?sort=size&order=desc",
                "project page (last page)": f"/projects/{PROJECT}?page={args.runs // 50}",
                "project page (text search)": f"/projects/{PROJECT}?q=000123",
                "run page": f"/projects/{PROJECT}/runs/{sample_id}",
                "anchor: API list of 50 runs": f"/api/v1/projects/{PROJECT}/runs?limit=50",
            }
            results: dict[str, dict[str, float]] = {}
            for label, path in pages.items():
                timed(client, path, args.warmup)
                results[label] = timed(client, path, args.requests)
                r = results[label]
                log(f"  {label:32s} server p50 {r['server_p50_ms']:6.1f} ms, "
                    f"p99 {r['server_p99_ms']:6.1f} ms "
                    f"(client p50 {r['client_p50_ms']:6.1f} ms)")  # fmt: skip
            anchor = results["anchor: API list of 50 runs"]["server_p50_ms"]
            sparkline = f"/projects/{PROJECT}/runs/{sample_id}/sparkline.svg"
            first = timed(client, sparkline, 1)["server_p50_ms"]
            again = timed(client, sparkline, args.requests)
            log(f"  sparkline (1,000 steps): first {first:.1f} ms, again p50 "
                f"{again['server_p50_ms']:.1f} ms")  # fmt: skip
            client.close()
    ratio: Callable[[str], float] = lambda label: results[label]["server_p50_ms"] / anchor  # noqa: E731
    return {
        "database": database,
        "runs_in_project": args.runs,
        "projects": args.projects,
        "requests_per_page": args.requests,
        "pages": results,
        "p50_ratio_to_anchor": {label: round(ratio(label), 2) for label in results},
        "sparkline_first_ms": first,
        "sparkline_again": again,
    }


def server_time_bench(
    doc: str, name: str, measure: Callable[..., dict[str, object]], options: dict[str, int]
) -> None:
    """Parse `--warmup`, `--databases` and the integer `options` (name -> default), measure
    on each database and print the JSON with the 200 ms p99 target."""
    parser = arguments(doc, warmup=20, json=False, databases="sqlite,postgresql")
    for option, default in options.items():
        parser.add_argument(f"--{option}", type=int, default=default)
    args = parser.parse_args()
    results = on_databases(args.databases, functools.partial(measure, args=args))
    emit_json({"benchmark": name, "results": results, "target": {"server_p99_ms": 200}})


def main() -> None:
    server_time_bench(__doc__, "ui_pages", measure,
                      {"requests": 300, "runs": 10_000, "projects": 100})  # fmt: skip


if __name__ == "__main__":
    main()
