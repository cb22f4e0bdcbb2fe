"""A saved view's board against the whole project's board, for a project of 5,000 runs x
200 steps: time to the first complete /data/runs, PSS, and time to first chart in Chromium.

A real `tbhub serve` over a project `bench` of 5,000 runs (each one event file of 200 steps
of one scalar tag, written straight with tbhub's TFRecord framing: TensorFlow's writer would
take many minutes), registered by the storage watcher. A view (`q` = "view-") matches the 50
runs named view-NNNN. Each round, for the view's board and the project's board in turn:

- the board stopped first (the project's with `tbhub admin board stop`; the view's board
  marked stopped in the database, as deleting its view would), then the clock runs until
  its /data/runs, asked for through nginx, lists every run it should (`runs_s`: the cold
  start, the supervisor's sync of the view's hard links included). As a person's starting
  page does (`--method follow`, the default): the board's state long-polled
  (`GET /api/v1/boards/<board>/state?since=board_starting&wait=25`, which also asks for the
  stopped board) until it says `ready`, then /data/runs, asked again every 50 ms only while
  it lists fewer runs than it should (a board still on its first load of the logdir).
  `--method poll` is the older way: /data/runs asked every 50 ms from the start, each ask
  answered by the control plane while the board starts, so the clock moved in steps of
  50 ms plus an ask's 10-50 ms, which weighed most on the short start of the view;
- once every run's tags are loaded (`/data/plugin/scalars/tags` names every run), the PSS
  of the board's process tree (`pss_mib`, /proc/<pid>/smaps_rollup);
- a fresh Chromium profile opens the board's URL and the clock stops at the first scalar
  chart drawn with its data (`chart_s`, bench/first_chart.py's watcher).

Target (issue 19): the view <= 0.2x the whole project on each figure.

    .venv/bin/python bench/view_board.py [--runs 3] [--warmup 0] [--no-chart]
        [--method follow|poll] [--json]

A first chart that does not settle within 10 minutes is counted as 600 s (a lower bound).

Needs nginx and chromium on PATH (or in /usr/sbin, /usr/bin).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from playwright.sync_api import Browser, sync_playwright
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

import first_chart as charts
from _places import PROJECT
from _processes import runs_listed, temp_dir, wait_for
from _reports import arguments, emit_report, log, measure_rounds, medians
from _sample_data import cached
from _tbhub import Tbhub
from board_memory import mib, tree_pss_bytes
from first_chart import CHART_WATCH, CHROMIUM, CHROMIUM_ARGS
from tbhub.storage.sample_logs import scalar_value
from tbhub.storage.tfrecord import framed

RUNS, STEPS, VIEW_RUNS = 5000, 200, 50
DATA = {"runs": RUNS, "steps": STEPS, "tags": 1, "view_runs": VIEW_RUNS}
KINDS = ("view", "whole")
FIGURES = ("runs_s", "pss_mib", "chart_s")
TARGET = 0.2
CHARTS = True  # --no-chart: the first two figures only (a whole-project chart takes minutes)
LOAD_TIMEOUT = 900.0
# How the clock follows a start: `follow`, the board's state long-polled as the starting page
# does, then /data/runs; `poll`, /data/runs asked every POLL_S from the start.
METHODS = ("follow", "poll")
METHOD = "follow"
# poll: seconds between asks for /data/runs while a board starts: under the view's start
# (about 0.2 s), which a 0.2 s poll rounded up to its next ask; not so often that the asks
# (each answered by the control plane while the board starts) slow the start they measure.
POLL_S = 0.05
# follow: seconds between asks for /data/runs once the board serves but lists fewer runs
# than it should (still on its first load), and the long-poll's wait (the page's). As
# POLL_S: each ask of a board still loading 5,000 runs is a listing it makes again, so
# asking more often would slow the whole project's load the view is compared with.
RELIST_S = POLL_S
STATE_WAIT_S = 25
# The whole project's first chart settles only once its 5,000 runs' points have come in.
charts.TIMEOUT_MS = 600_000


@dataclass
class Sample:
    kind: str
    index: int
    runs_s: float
    pss_mib: float
    chart_s: float


def run_names() -> list[str]:
    return [f"view-{i:04d}" if i < VIEW_RUNS else f"run-{i:04d}" for i in range(RUNS)]


def write_runs(staging: Path) -> str:
    """One event file per run, framed as TensorFlow's writer frames it."""
    for index, name in enumerate(run_names()):
        run = staging / PROJECT / name
        run.mkdir(parents=True)
        records = [framed(Event(wall_time=1_700_000_000.0, file_version="brain.Event:2")
                          .SerializeToString())]  # fmt: skip
        for step in range(STEPS):
            value = Summary.Value(tag="metric/0", simple_value=scalar_value(index % 50, 0, step))
            event = Event(wall_time=1_700_000_000.0 + step, step=step,
                          summary=Summary(value=[value]))  # fmt: skip
            records.append(framed(event.SerializeToString()))
        (run / "events.out.tfevents.1700000000.bench").write_bytes(b"".join(records))
    return f"{RUNS} runs x {STEPS} steps x 1 tag\n"


def registered(hub: Tbhub) -> int:
    with sqlite3.connect(hub.data_dir / "tbhub.sqlite3") as db:
        return int(db.execute("SELECT count(*) FROM runs").fetchone()[0])


def board_pid(hub: Tbhub, board: str) -> int | None:
    for record in hub.data_dir.glob("boards/*.json"):
        try:
            state = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        if state.get("project") == board:
            return int(state["pid"])
    return None


def stop_board(hub: Tbhub, board: str) -> None:
    """Stop the board and wait until its process is gone: the next open is cold."""
    if board == PROJECT:
        hub.cli("admin", "board", "stop", PROJECT)
    else:
        with sqlite3.connect(hub.data_dir / "tbhub.sqlite3") as db:
            db.execute("UPDATE compare_boards SET desired_state = 'stopped' WHERE slug = ?",
                       (board,))  # fmt: skip
    wait_for(lambda: board_pid(hub, board) is None, timeout=120,
             what=f"board {board} to stop", interval=0.2)  # fmt: skip


def follow_until_ready(client: httpx.Client, hub: Tbhub, board: str) -> None:
    """Long-poll the board's state as the starting page (static/starting.js) does, from
    `board_starting`, until it says `ready`; the first ask also asks for the stopped board."""
    state = "board_starting"
    deadline = time.monotonic() + LOAD_TIMEOUT
    while state != "ready":
        if state != "board_starting" or time.monotonic() > deadline:
            raise RuntimeError(f"board {board}: {state} instead of ready")
        response = client.get(f"{hub.base_url}/api/v1/boards/{board}/state",
                              params={"since": state, "wait": STATE_WAIT_S})  # fmt: skip
        response.raise_for_status()
        state = response.json()["state"]


def first_chart(browser: Browser, hub: Tbhub, cookie: str, url: str) -> float:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(CHART_WATCH)
    context.add_cookies([{"name": "tbhub_session", "value": cookie, "url": hub.base_url}])
    try:
        page = context.new_page()
        started_ms = time.time() * 1000
        page.goto(hub.base_url + url)
        return charts.first_chart(page, started_ms, trace_from_us=None).seconds
    finally:
        context.close()


def measure(
    hub: Tbhub, client: httpx.Client, browser: Browser, cookie: str, kind: str, index: int,
    target: tuple[str, str, list[str]],
) -> Sample:  # fmt: skip
    board, url, names = target
    stop_board(hub, board)
    started = time.monotonic()
    if METHOD == "follow":
        follow_until_ready(client, hub, board)
    wait_for(runs_listed(client, f"{hub.base_url}{url}data/runs", names), timeout=LOAD_TIMEOUT,
             what=f"{kind}: /data/runs to list {len(names)} runs",
             interval=RELIST_S if METHOD == "follow" else POLL_S)  # fmt: skip
    runs_s = time.monotonic() - started

    def loaded() -> bool:
        response = client.get(f"{hub.base_url}{url}data/plugin/scalars/tags")
        return response.status_code == 200 and len(response.json()) >= len(names)

    wait_for(loaded, timeout=LOAD_TIMEOUT, what=f"{kind}: every run's tags", interval=1.0)
    time.sleep(2.0)
    pid = board_pid(hub, board)
    pss = mib(tree_pss_bytes(pid)) if pid is not None else float("nan")
    if not CHARTS:
        log(f"  {kind}: runs {runs_s:.2f}s, pss {pss:.0f} MiB")
        return Sample(kind, index, runs_s, pss, float("nan"))
    log(f"  {kind}: runs {runs_s:.2f}s, pss {pss:.0f} MiB; now the first chart ...")
    try:
        chart_s = first_chart(browser, hub, cookie, url)
    except TimeoutError:  # never settled: counted as the time given, a lower bound
        chart_s = charts.TIMEOUT_MS / 1000
        log(f"  {kind}: no chart with its data within {chart_s:.0f}s (counted as {chart_s:.0f}s)")
    log(f"  {kind}: chart {chart_s:.2f}s")
    return Sample(kind, index, runs_s, pss, chart_s)


def run(repeats: int, warmup: int) -> list[Sample]:
    data = cached(f"views-r{RUNS}-s{STEPS}-t1", write_runs) / PROJECT
    names = run_names()
    with temp_dir("tbhub-bench-view-board.") as work:
        storage = work / "storage"
        shutil.copytree(data, storage / PROJECT)
        # No memory limit or budget: the 5,000-run board must not be replaced mid-measure.
        env = {"TBHUB_RECONCILE_INTERVAL": "1", "TBHUB_BOARD_MEMORY_LIMIT": "0",
               "TBHUB_BOARD_MEMORY_BUDGET": "0", "TBHUB_BOARD_START_TIMEOUT": "900"}  # fmt: skip
        hub = Tbhub(root=work / "tbhub", storage_root=storage, extra_env=env)
        with hub.serving(), sync_playwright() as playwright:
            wait_for(lambda: registered(hub) >= RUNS, timeout=LOAD_TIMEOUT,
                     what=f"the watcher to register {RUNS} runs", interval=1.0)  # fmt: skip
            cookie = hub.sign_in()
            with hub.browser(cookie, timeout=60.0) as client:
                csrf = client.get(f"{hub.base_url}/api/v1/csrf").json()["token"]
                made = client.post(f"{hub.base_url}/api/v1/projects/{PROJECT}/views",
                                   json={"name": "fifty", "filter": {"q": "view-"}},
                                   headers={"X-CSRF-Token": csrf})  # fmt: skip
                made.raise_for_status()
                view = made.json()
                assert view["runs"] == VIEW_RUNS, view
                slug = view["board_url"].split("/")[2]
                targets = {
                    "view": (slug, view["board_url"],
                             [f"{PROJECT}/{n}" for n in names[:VIEW_RUNS]]),
                    "whole": (PROJECT, f"/boards/{PROJECT}/", names),
                }  # fmt: skip
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                try:
                    return measure_rounds(
                        repeats, warmup,
                        lambda i, _l: [measure(hub, client, browser, cookie, k, i, targets[k])
                                       for k in KINDS],
                        lambda s: f"{s.kind} runs {s.runs_s:.2f}s pss {s.pss_mib:.0f} MiB "
                        f"chart {s.chart_s:.2f}s",
                    )  # fmt: skip
                finally:
                    browser.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=3, warmup=0)
    parser.add_argument("--no-chart", action="store_true", help="skip the first chart")
    parser.add_argument("--method", choices=METHODS, default=METHODS[0],
                        help="how the clock follows a start (see above)")  # fmt: skip
    args = parser.parse_args(argv)
    global CHARTS, METHOD
    CHARTS, METHOD = not args.no_chart, args.method
    samples = run(args.runs, args.warmup)
    shown = FIGURES if CHARTS else FIGURES[:2]
    figures = {f: medians(samples, KINDS, lambda s, f=f: float(getattr(s, f))) for f in shown}
    ratios = {f: round(figures[f]["view"] / figures[f]["whole"], 3) for f in shown}
    summary = f"view_board (medians, n={args.runs}, {METHOD}): " + "; ".join(
        f"{f} view {figures[f]['view']:.2f} whole {figures[f]['whole']:.2f} = {ratios[f]}x "
        f"(target <= {TARGET}x: {'met' if ratios[f] <= TARGET else 'MISSED'})"
        for f in shown
    )
    if args.json:
        emit_report("view_board", data=DATA, samples=samples, n=args.runs, summary=summary,
                    figures=figures, ratios=ratios)  # fmt: skip
        return 0
    log(summary)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
