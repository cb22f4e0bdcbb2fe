"""Time to first chart, as a person sees it: from the click on "Open board" on the project page
to the first scalar chart drawn with its data, in Debian's Chromium, against a bare
TensorBoard opened directly on the same logs.

A real `tbhub serve` (nginx, control plane, supervisor, board zygote) over the standard sample
logdir (5 runs x 200 steps x 2 scalar tags, tbhub.storage.sample_logs), and a bare
`tensorboard --logdir` on a copy of it. Six kinds of visit, each round in turn:

- cold: the board stopped first (`tbhub admin board stop`); the starting page follows it
  and hands over to TensorBoard;
- warm: the board running;
- bare: the bare TensorBoard's URL opened directly (no click: it has no project page);

each in a fresh browser profile (a new context: empty cache) and in a returning one (one
context per target that has opened the board before, so its cache holds what TensorBoard
let it keep). The clock stops when the first scalar card's y axis shows the data's range:
the card draws an empty chart with a 0..1 axis first, and its canvas with the curve in the
same frame as the data's axis. A MutationObserver in the page notes the time of the last
change; the visit ends when it has not changed for a second.

Targets (issue 19): cold <= 1.2x warm; warm <= 0.8x bare in a fresh profile, and <= 0.5x
bare in a returning one.

    .venv/bin/python bench/first_chart.py [--runs 5] [--warmup 1] [--json]

Needs nginx and chromium on PATH (or in /usr/sbin, /usr/bin).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from _places import HOST, PROJECT, free_port
from _processes import ready_bare_tensorboard, temp_dir, wait_for
from _reports import arguments, emit_report, measure_rounds, medians
from _sample_data import copied_logdir
from _tbhub import Tbhub

RUNS, STEPS, TAGS = 5, 200, 2
DATA = {"runs": RUNS, "steps": STEPS, "tags": TAGS}
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update"]  # fmt: skip
TIMEOUT_MS = 120_000
SETTLED_S = 1.0
EMPTY_AXIS = "0|0.2|0.4|0.6|0.8|1"
KINDS = ("cold_fresh", "warm_fresh", "bare_fresh", "cold_returning", "warm_returning",
         "bare_returning")  # fmt: skip
TARGETS = (
    ("cold_fresh", "warm_fresh", 1.2),
    ("cold_returning", "warm_returning", 1.2),
    ("warm_fresh", "bare_fresh", 0.8),
    ("warm_returning", "bare_returning", 0.5),
)

# Run in every page before its own scripts: the epoch ms of the last change of the first
# scalar card's y axis while the card has its chart's canvas.
CHART_WATCH = """
(() => {
  window.__firstChart = null;
  window.__axis = "";
  const look = () => {
    const card = document.querySelector("scalar-card");
    if (!card || !card.querySelector("line-chart canvas")) return;
    const ticks = Array.from(card.querySelectorAll(".y-axis text"))
      .map((t) => t.textContent.trim()).join("|");
    if (ticks && ticks !== window.__axis) {
      window.__axis = ticks;
      window.__firstChart = Date.now();
    }
  };
  const changes = {subtree: true, childList: true, characterData: true};
  new MutationObserver(look).observe(document, changes);
})();
"""


@dataclass
class Sample:
    kind: str
    index: int
    seconds: float


def first_chart_seconds(page: Page, started_ms: float) -> float:
    """Seconds from `started_ms` (epoch) to the first chart drawn with its data."""
    page.wait_for_selector("scalar-card line-chart canvas", state="attached", timeout=TIMEOUT_MS)

    def settled() -> bool:
        axis, at = page.evaluate("[window.__axis, window.__firstChart]")
        return bool(at) and axis != EMPTY_AXIS and time.time() * 1000 - at >= SETTLED_S * 1000

    wait_for(settled, timeout=TIMEOUT_MS / 1000, what="the first chart to show its data",
             interval=0.1)  # fmt: skip
    return (float(page.evaluate("window.__firstChart")) - started_ms) / 1000


def visit_tbhub(hub: Tbhub, context: BrowserContext) -> float:
    """The project page, then a click on its "Open board"."""
    page = context.new_page()
    try:
        page.goto(f"{hub.base_url}/projects/{PROJECT}")
        link = page.get_by_role("link", name="Open board").first
        started_ms = time.time() * 1000
        link.click()
        return first_chart_seconds(page, started_ms)
    finally:
        page.close()


def visit_bare(url: str, context: BrowserContext) -> float:
    page = context.new_page()
    try:
        started_ms = time.time() * 1000
        page.goto(url)
        return first_chart_seconds(page, started_ms)
    finally:
        page.close()


def stop_board(hub: Tbhub) -> None:
    """Stop the bench board and wait until its process is gone: the next open is cold."""
    hub.cli("admin", "board", "stop", PROJECT)
    wait_for(lambda: not list(hub.data_dir.glob("boards/*.json")), timeout=60,
             what="the bench board to stop", interval=0.1)  # fmt: skip


class Visits:
    """The browser contexts of one bench: returning ones kept, fresh ones made per visit."""

    def __init__(self, browser: Browser, hub: Tbhub, cookie: str, bare_url: str) -> None:
        self.browser, self.hub, self.cookie, self.bare_url = browser, hub, cookie, bare_url
        self.returning = {"tbhub": self.context(), "bare": self.context()}

    def context(self) -> BrowserContext:
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_init_script(CHART_WATCH)
        context.add_cookies([{"name": "tbhub_session", "value": self.cookie,
                              "url": self.hub.base_url}])  # fmt: skip
        return context

    def fresh(self, visit: Callable[[BrowserContext], float]) -> float:
        context = self.context()
        try:
            return visit(context)
        finally:
            context.close()

    def round(self, index: int) -> list[Sample]:
        tbhub = lambda context: visit_tbhub(self.hub, context)  # noqa: E731
        bare = lambda context: visit_bare(self.bare_url, context)  # noqa: E731
        seconds: dict[str, float] = {}
        seconds["bare_fresh"] = self.fresh(bare)
        seconds["bare_returning"] = bare(self.returning["bare"])
        seconds["warm_fresh"] = self.fresh(tbhub)
        seconds["warm_returning"] = tbhub(self.returning["tbhub"])
        stop_board(self.hub)
        seconds["cold_fresh"] = self.fresh(tbhub)
        stop_board(self.hub)
        seconds["cold_returning"] = tbhub(self.returning["tbhub"])
        return [Sample(kind, index, seconds[kind]) for kind in KINDS]

    def close(self) -> None:
        for context in self.returning.values():
            context.close()


def run(repeats: int, warmup: int) -> list[Sample]:
    with temp_dir("tbhub-bench-first-chart.") as work:
        storage, names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
        bare_logdir = work / "bare"
        shutil.copytree(storage / PROJECT, bare_logdir)
        port = free_port()
        bare, _ = ready_bare_tensorboard(bare_logdir, names, work / "tensorboard.log",
                                         timeout=120, port=port)  # fmt: skip
        hub = Tbhub(root=work / "tbhub", storage_root=storage)
        try:
            with hub.serving(), sync_playwright() as playwright:
                cookie = hub.sign_in()
                hub.wait_for_board(cookie, "data/runs")
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                visits = Visits(browser, hub, cookie, f"http://{HOST}:{port}/")
                try:
                    return measure_rounds(repeats, max(warmup, 1), lambda i, _l: visits.round(i),
                                          lambda s: f"{s.kind} {s.seconds:.2f}s")  # fmt: skip
                finally:
                    visits.close()
                    browser.close()
        finally:
            bare.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(__doc__, runs=5, warmup=1).parse_args(argv)
    samples = run(args.runs, args.warmup)
    median_s = medians(samples, KINDS, lambda s: s.seconds)
    ratios = {f"{a}/{b}": round(median_s[a] / median_s[b], 2) for a, b, _ in TARGETS}
    met = {f"{a}/{b}": median_s[a] / median_s[b] <= target for a, b, target in TARGETS}
    summary = (
        f"first_chart (medians, n={args.runs}): "
        + ", ".join(f"{kind} {median_s[kind]:.2f}s" for kind in KINDS)
        + "; "
        + ", ".join(
            f"{name} {ratio}x (target <= {target}x: {'met' if met[name] else 'MISSED'})"
            for (name, ratio), (_, _, target) in zip(ratios.items(), TARGETS, strict=True)
        )
    )
    if args.json:
        emit_report("first_chart", data=DATA, samples=samples, median_s=median_s, n=args.runs,
                    ratios=ratios, met=met, summary=summary)  # fmt: skip
        return 0
    for index in range(1, args.runs + 1):
        row = {s.kind: s.seconds for s in samples if s.index == index}
        print(f"{index:>4} " + " ".join(f"{kind} {row[kind]:.2f}s" for kind in KINDS))
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
