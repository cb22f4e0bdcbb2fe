"""Server time of a search of runs by hyperparameter and metric (`GET /api/v1/runs`) over
100,000 runs in 20 projects, p99 per round and the median of the rounds, on SQLite and
PostgreSQL.

A real `tbhub serve` (nginx, control plane); its database is seeded directly with
`--projects` projects owned by the bench user and `--total` runs spread over them, each
with 3 hyperparameters and 2 metrics (their `run_params` rows as the registry keeps them).
Each search is fetched `--requests` times in a row by one signed-in client (after a
warm-up), through nginx, `--rounds` times. The figure is the server time the control plane
reports in its `Server-Timing: app;dur=` header. The anchor is the project runs list,
`GET /api/v1/projects/bench/runs?limit=50`, measured the same way. Target: p99 <= 200 ms.
"page 20 by metric, by cursor" is the page the offset search reads (offset 1000), reached
the way a client pages: 20 `next_cursor` hops of 50.

    python bench/run_search.py [--total 100000] [--requests 200] [--rounds 3]
                               [--databases sqlite,postgresql]
"""

from __future__ import annotations

import random
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import create_engine, insert, select

from _places import PROJECT, USER
from _processes import temp_dir
from _reports import log
from _tbhub import hub_on_database
from tbhub.core.models import Project, Run, RunParam
from tbhub.domain.run_params import param_cell
from ui_pages import add_projects, server_time_bench, timed

LRS = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
SEARCHES = {
    "one hparam, newest first": "/api/v1/runs?hparam.lr=0.001",
    "hparam and metric, best first": "/api/v1/runs?hparam.lr=0.001&metric.accuracy>=0.9"
    "&sort=-metric.accuracy",
    "text hparam, by metric": "/api/v1/runs?hparam.optimizer=adam&sort=-metric.accuracy",
    "all runs by metric": "/api/v1/runs?sort=-metric.accuracy",
    "metric range, one project": f"/api/v1/runs?project={PROJECT}&metric.val_loss<0.1",
    "a rare value": "/api/v1/runs?hparam.seed=4242",
    "page 20 by metric": "/api/v1/runs?hparam.lr=0.001&sort=-metric.accuracy&offset=1000",
    # Filled in at run time: the same page reached by cursor, 20 pages in, as a client pages.
    "page 20 by metric, by cursor": "/api/v1/runs?hparam.lr=0.001&sort=-metric.accuracy",
    "anchor: project runs list": f"/api/v1/projects/{PROJECT}/runs?limit=50",
}


def seed(url: str, storage: Path, *, total: int, projects: int) -> None:
    """Projects owned by the bench user and `total` runs over them, with their params."""
    engine = create_engine(url)
    rng = random.Random(11)
    now = datetime.now(UTC)
    try:
        with engine.begin() as db:
            add_projects(db, storage, projects - 1, now)
            ids = list(db.scalars(select(Project.id).order_by(Project.id)))
            first_id = (db.scalar(select(Run.id).order_by(Run.id.desc()).limit(1)) or 0) + 1
            runs, params = [], []
            for i in range(total):
                run_id = first_id + i
                hparams = {"lr": rng.choice(LRS), "optimizer": rng.choice(["adam", "sgd"]),
                           "seed": rng.randrange(100_000)}  # fmt: skip
                metrics = {"accuracy": rng.random(), "val_loss": rng.random()}
                runs.append({
                    "id": run_id, "project_id": ids[i % len(ids)],
                    "path": f"sweep/20261201-{i:06d}-run", "name": f"run-{i}",
                    "group_name": "sweep", "status": "finished", "source": "api",
                    "retention_state": "present", "hparams": hparams, "metrics": metrics,
                    "created_by": USER, "created_at": now - timedelta(seconds=total - i),
                    "updated_at": now, "bytes": 0, "files": 0,
                })  # fmt: skip
                for kind, values in (("h", hparams), ("m", metrics)):
                    for key, value in values.items():
                        num, text = param_cell(value)
                        params.append({"run_id": run_id, "kind": kind, "key": key, "num": num,
                                       "text": text})  # fmt: skip
                if len(runs) >= 5000:
                    db.execute(insert(Run), runs)
                    db.execute(insert(RunParam), params)
                    runs, params = [], []
            if runs:
                db.execute(insert(Run), runs)
                db.execute(insert(RunParam), params)
        if url.startswith("postgresql"):
            # As autovacuum leaves a table after a bulk load: statistics and the visibility
            # map, without which PostgreSQL reads the heap for what an index already holds.
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as db:
                db.exec_driver_sql("VACUUM ANALYZE")
        else:
            with engine.begin() as db:
                db.exec_driver_sql("ANALYZE")
    finally:
        engine.dispose()


CURSOR_LABEL = "page 20 by metric, by cursor"


def deep_cursor(client: httpx.Client, path: str, *, pages: int) -> str:
    """`path` with the cursor of the page `pages` pages of 50 in, followed page by page."""
    cursor = ""
    for _ in range(pages):
        page = client.get(path + (f"&cursor={cursor}" if cursor else ""))
        page.raise_for_status()
        cursor = page.json()["next_cursor"]
        if not cursor:
            raise SystemExit(f"{path} ended before page {pages}")
    return f"{path}&cursor={cursor}"


def measure(database: str, url: str, args: object) -> dict[str, object]:
    total, projects, requests, rounds, warmup = (
        getattr(args, name) for name in ("total", "projects", "requests", "rounds", "warmup")
    )
    with temp_dir("tbhub-bench-search-") as root:
        hub = hub_on_database(root, url)

        def seed_database() -> None:
            log(f"{database}: seeding {projects} projects, {total} runs ...")
            seed(url, root / "storage", total=total, projects=projects)

        with hub.serving(prepare=seed_database):
            client = httpx.Client(base_url=hub.base_url, timeout=30.0,
                                  cookies={"tbhub_session": hub.sign_in()})  # fmt: skip
            searches = {**SEARCHES}
            searches[CURSOR_LABEL] = deep_cursor(client, SEARCHES[CURSOR_LABEL], pages=20)
            p99s: dict[str, list[float]] = {label: [] for label in SEARCHES}
            p50s: dict[str, list[float]] = {label: [] for label in SEARCHES}
            for path in searches.values():
                timed(client, path, warmup)
            for round_no in range(rounds):
                for label, path in searches.items():
                    result = timed(client, path, requests)
                    p99s[label].append(result["server_p99_ms"])
                    p50s[label].append(result["server_p50_ms"])
                log(f"  round {round_no + 1}/{rounds} done")
            client.close()
    results = {
        label: {"server_p50_ms": round(statistics.median(p50s[label]), 1),
                "server_p99_ms": round(statistics.median(p99s[label]), 1),
                "server_p99_ms_rounds": [round(v, 1) for v in p99s[label]]}
        for label in SEARCHES
    }  # fmt: skip
    for label, r in results.items():
        log(f"  {label:32s} server p50 {r['server_p50_ms']:6.1f} ms, "
            f"p99 {r['server_p99_ms']:6.1f} ms (median of {rounds} rounds)")  # fmt: skip
    return {"database": database, "runs": total, "projects": projects,
            "requests_per_round": requests, "rounds": rounds, "searches": results}  # fmt: skip


def main() -> None:
    server_time_bench(__doc__, "run_search", measure,
                      {"total": 100_000, "projects": 20, "requests": 200, "rounds": 3})  # fmt: skip


if __name__ == "__main__":
    main()
