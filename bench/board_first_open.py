"""First open of a stopped board in a real browser: seconds from opening the board's URL to
TensorBoard's page, and to its first scalar card, the median of several runs.

A real `tbhub serve` (nginx, control plane, supervisor, board zygote) over a project of
5 runs x 200 steps x 2 scalar tags (tbhub.storage.sample_logs); Debian's Chromium, driven by
Playwright, with the bench user's session cookie. Each run stops the board
(`tbhub admin board stop`), waits until its process is gone, then opens /boards/bench/ in a
new browser context, as a click on "Open board" does: the starting page follows the board
and shows it the moment it lists its runs. Reported per run: to TensorBoard (its
<tb-webapp> is in the page), to the first scalar card (`metric/0` is shown), and how long
after the board was ready (its observed state, as the supervisor recorded it) TensorBoard's
page began to load: what the starting page adds to the board's own start. The first
open of a stopped board took 3.8 s to TensorBoard and 4.6 s to charts when the starting page
reloaded every 2 s, though the board was ready in 0.2-0.3 s.

    .venv/bin/python bench/board_first_open.py [--runs 5] [--warmup 1] [--json]

Needs nginx and chromium on PATH (or in /usr/sbin, /usr/bin). Uses ports 19000-19499 on
127.0.0.1 only (TBHUB_BENCH_PORTS).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass

from playwright.sync_api import Browser, sync_playwright
from sqlalchemy import create_engine, select

from _places import PROJECT
from _processes import temp_dir, wait_for
from _reports import arguments, emit_report, measure_rounds, medians
from _sample_data import copied_logdir
from _tbhub import Tbhub
from tbhub.core.models import Board, ObservedState, Project

RUNS, STEPS, TAGS = 5, 200, 2
DATA = {"runs": RUNS, "steps": STEPS, "tags": TAGS}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]  # fmt: skip
TIMEOUT_MS = 120_000


@dataclass
class Sample:
    kind: str  # "tensorboard", "charts" or "after_ready"
    index: int
    seconds: float


def stop_board(hub: Tbhub) -> None:
    """Stop the bench board and wait until its process is gone: the next open is cold."""
    hub.cli("admin", "board", "stop", PROJECT)
    wait_for(lambda: not list(hub.data_dir.glob("boards/*.json")), timeout=60,
             what="the bench board to stop", interval=0.1)  # fmt: skip


def open_cold(hub: Tbhub, browser: Browser, cookie: str, index: int) -> list[Sample]:
    stop_board(hub)
    context = browser.new_context()
    try:
        context.add_cookies([{"name": "tbhub_session", "value": cookie, "url": hub.base_url}])
        page = context.new_page()
        started = time.monotonic()
        page.goto(hub.board_url("/"))
        page.wait_for_selector("tb-webapp", state="attached", timeout=TIMEOUT_MS)
        to_board = time.monotonic() - started
        page.wait_for_selector("text=metric/0", timeout=TIMEOUT_MS)
        to_charts = time.monotonic() - started
        loaded_at = page.evaluate("performance.timeOrigin") / 1000  # TensorBoard's page
    finally:
        context.close()
    after_ready = loaded_at - ready_at(hub)
    return [Sample("tensorboard", index, to_board), Sample("charts", index, to_charts),
            Sample("after_ready", index, after_ready)]  # fmt: skip


def ready_at(hub: Tbhub) -> float:
    """When the supervisor recorded the bench board as ready (epoch seconds)."""
    engine = create_engine(f"sqlite:///{hub.data_dir / 'tbhub.sqlite3'}")
    try:
        with engine.connect() as db:
            at = db.scalar(
                select(Board.observed_at).join(Project, Project.id == Board.project_id)
                .where(Project.name == PROJECT, Board.observed_state == ObservedState.ready)
            )  # fmt: skip
    finally:
        engine.dispose()
    if at is None:
        raise RuntimeError("the bench board is not recorded as ready")
    return float(at.timestamp())


def run(repeats: int, warmup: int) -> list[Sample]:
    with temp_dir("tbhub-bench-first-open.") as work:
        storage, _ = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
        hub = Tbhub(root=work / "tbhub", storage_root=storage)
        with hub.serving(), sync_playwright() as playwright:
            cookie = hub.sign_in()
            hub.wait_for_board(cookie, "data/runs")  # the zygote and the board warmed once
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                return measure_rounds(
                    repeats, warmup, lambda i, _label: open_cold(hub, browser, cookie, i),
                    lambda s: f"{s.kind} {s.seconds:.2f}s",
                )  # fmt: skip
            finally:
                browser.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, runs=5, warmup=1).parse_args(argv)
    samples = run(args.runs, args.warmup)
    median_s = medians(samples, ["tensorboard", "charts", "after_ready"], lambda s: s.seconds)
    summary = (
        f"board_first_open: a stopped board's first open, median {median_s['tensorboard']:.2f}s "
        f"to TensorBoard ({median_s['after_ready']:.2f}s after the board was ready), "
        f"{median_s['charts']:.2f}s to the first scalar card (n={args.runs})"
    )
    if args.json:
        emit_report("board_first_open", data=DATA, samples=samples, median_s=median_s,
                    n=args.runs, summary=summary)  # fmt: skip
        return 0
    for index in range(1, args.runs + 1):
        row = {s.kind: s.seconds for s in samples if s.index == index}
        print(f"{index:>4} tensorboard {row['tensorboard']:.2f}s charts {row['charts']:.2f}s "
              f"after ready {row['after_ready']:.2f}s")  # fmt: skip
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
