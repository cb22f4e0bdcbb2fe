"""Supervisor CPU per reconcile pass with 1,000 projects and 50 live boards.

What it measures: one `Supervisor.reconcile_once()` in this process, against a database
(SQLite in a temp dir, or --database-url) holding 1,000 projects of which 50 want their
board, and 50 live board processes. The boards are small stand-in HTTP servers (the real
tbhub launcher and backend start them, the supervisor probes `/data/environment` and reads
their PSS like any board's): 50 real TensorBoards would measure the host, not the
supervisor. Reported: CPU seconds of this process (all threads) and wall time per pass,
median of --passes passes, for two kinds of pass:

- full: probes, PSS of every board, database read and write (once per interval);
- fast: probes and database only (the 0.1 s passes while a board starts).

and the share of one core that full passes take at the default 5 s interval.

    .venv/bin/python bench/reconcile_cpu.py [--passes 20] [--database-url URL] [--json]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _processes import temp_dir
from _reports import arguments, at_least, log, median, report
from tbhub.core.db import make_engine, make_session_factory, transaction, upgrade
from tbhub.core.models import Board, DesiredState, Project
from tbhub.domain.boards import AccessTracker
from tbhub.supervisor.backends.local import LocalBackend
from tbhub.supervisor.loop import Supervisor
from tbhub.supervisor.plan import Policy

PROJECTS, LIVE = 1000, 50
DEFAULT_INTERVAL = 5.0
PROFILE = "--profile" in sys.argv


def seed(url: str, storage: Path) -> None:
    upgrade(url)
    engine = make_engine(url)
    with transaction(make_session_factory(engine)) as session:
        for index in range(PROJECTS):
            name = f"p{index:04d}"
            (storage / name).mkdir(parents=True)
            state = DesiredState.running if index < LIVE else DesiredState.stopped
            session.add(Project(name=name, board=Board(desired_state=state)))
    engine.dispose()


def measure(supervisor: Supervisor, passes: int, *, full: bool) -> tuple[float, float]:
    if PROFILE:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        supervisor.reconcile_once()
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    """Median CPU seconds and wall seconds of one pass."""
    cpu, wall = [], []
    for _ in range(passes):
        # A full pass reads PSS; a fast one comes right after the last measurement.
        supervisor._memory_measured_at = float("-inf") if full else time.time()
        began_cpu, began_wall = time.process_time(), time.perf_counter()
        supervisor.reconcile_once()
        cpu.append(time.process_time() - began_cpu)
        wall.append(time.perf_counter() - began_wall)
    return median(cpu), median(wall)


def run(passes: int, database_url: str | None) -> dict[str, object]:
    from tests.support.stand_in_board import stand_in_board  # importable once _places ran

    with temp_dir("tbhub-bench-reconcile.") as work:
        url = database_url or f"sqlite:///{work / 'tbhub.sqlite3'}"
        storage = work / "storage"
        seed(url, storage)
        script = work / "stand-in-board"
        script.write_text(f"#!{sys.executable}\n{stand_in_board()}")
        script.chmod(0o755)
        backend = LocalBackend(state_dir=work / "boards", owner=str(work),
                               tensorboard_bin=str(script), stop_grace=2.0)  # fmt: skip
        engine = make_engine(url)
        supervisor = Supervisor(
            factory=make_session_factory(engine), backend=backend, tracker=AccessTracker(),
            storage_root=str(storage), idle_timeout=86400, interval=DEFAULT_INTERVAL,
            policy=Policy(start_timeout=120),
        )  # fmt: skip
        try:
            log(f"starting {LIVE} stand-in boards ...")
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                supervisor.reconcile_once()
                ready = sum(1 for h in supervisor._health.values() if h.ready_at is not None)
                if ready == LIVE:
                    break
                time.sleep(0.2)
            else:
                raise TimeoutError("the stand-in boards did not all get ready")
            full = measure(supervisor, passes, full=True)
            fast = measure(supervisor, passes, full=False)
        finally:
            supervisor.shutdown(stop_boards=True)
            engine.dispose()
    return {
        "projects": PROJECTS,
        "live_boards": LIVE,
        "database": "sqlite" if database_url is None else database_url.split(":")[0],
        "passes": passes,
        "full_pass_cpu_s": full[0],
        "full_pass_wall_s": full[1],
        "fast_pass_cpu_s": fast[0],
        "fast_pass_wall_s": fast[1],
        "core_share_at_5s_interval": full[0] / DEFAULT_INTERVAL,
    }


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--passes", type=at_least(1), default=20)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--profile", action="store_true", help="cProfile one pass to stderr")
    args = parser.parse_args()
    result = run(args.passes, args.database_url)
    report(result, as_json=args.json, text=(
        f"{PROJECTS} projects, {LIVE} live boards ({result['database']}), median of "
        f"{args.passes} passes:\n"
        f"  full pass (probes, PSS, database): {result['full_pass_cpu_s'] * 1000:.0f} ms CPU, "
        f"{result['full_pass_wall_s'] * 1000:.0f} ms wall\n"
        f"  fast pass (probes, database):      {result['fast_pass_cpu_s'] * 1000:.0f} ms CPU, "
        f"{result['fast_pass_wall_s'] * 1000:.0f} ms wall\n"
        f"  at the default 5 s interval: {result['core_share_at_5s_interval']:.1%} of one core"
    ))  # fmt: skip


if __name__ == "__main__":
    main()
