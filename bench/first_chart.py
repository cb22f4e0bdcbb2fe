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

each in a fresh browser profile (a new incognito context: empty cache) and in a returning one
(one profile on disk per target that has opened the board before, so its cache holds what
TensorBoard let it keep, and V8's code cache what Chromium compiled: an incognito context
has no code cache, so `--returning incognito` measures without it). The clock stops when
the first scalar card's y axis shows the data's range:
the card draws an empty chart with a 0..1 axis first, and its canvas with the curve in the
same frame as the data's axis. A MutationObserver in the page notes the time of the last
change; the visit ends when it has not changed for a second.

The clock counts a prerendered page's chart from the page's activation at the earliest, but
under Playwright Chromium prerenders nothing (the project page's Speculation Rules): see
bench/first_chart_tab.py for visits with the prerender at work.

Each tbhub visit is also split in two: `wait` (the click to the start of TensorBoard's
document: the starting page's share of a cold visit) and `page` (that start to the chart).
With `--breakdown`, one more visit of each kind runs under Chromium's tracing
(bench/_timeline.py) and reports, from the document's start: the page's HTML and index.js
received, the first data request (TensorBoard's script has run far enough to ask), the
chart; and index.js's compile and evaluation, all JavaScript and all style and layout on the
page's main thread, and whether the compile consumed V8's code cache.

Targets (issue 19): cold <= 1.2x warm; warm <= 0.8x bare in a fresh profile, and <= 0.5x
bare in a returning one.

    .venv/bin/python bench/first_chart.py [--runs 5] [--warmup 1] [--breakdown]
        [--returning profile|incognito] [--json]

Needs nginx and chromium on PATH (or in /usr/sbin, /usr/bin).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from _places import HOST, PROJECT, free_port
from _processes import Group, ready_bare_tensorboard, temp_dir, wait_for
from _reports import arguments, emit_report, measure_rounds, medians
from _sample_data import copied_logdir
from _tbhub import Tbhub
from _timeline import resources, summarize, traced

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


# The chart's time, the document's time origin, and when it was shown (epoch ms): a
# prerendered document is shown at its activation (activationStart after its origin).
ACTIVATION = """
(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const activation = nav && nav.activationStart ? nav.activationStart : 0;
  return [window.__firstChart, performance.timeOrigin, performance.timeOrigin + activation];
})()
"""


@dataclass
class Sample:
    kind: str
    index: int
    seconds: float
    wait_s: float = 0.0  # the click to the start of TensorBoard's document
    page_s: float = 0.0  # that start (or the click, for a prerendered page) to the first chart
    breakdown: dict[str, Any] = field(default_factory=dict)


@dataclass
class Visit:
    seconds: float
    wait_s: float
    page_s: float
    breakdown: dict[str, Any]


def first_chart(page: Page, started_ms: float, *, trace_from_us: float | None) -> Visit:
    """From `started_ms` (epoch) to the first chart drawn with its data."""
    page.wait_for_selector("scalar-card line-chart canvas", state="attached", timeout=TIMEOUT_MS)

    def settled() -> bool:
        axis, at = page.evaluate("[window.__axis, window.__firstChart]")
        return bool(at) and axis != EMPTY_AXIS and time.time() * 1000 - at >= SETTLED_S * 1000

    wait_for(settled, timeout=TIMEOUT_MS / 1000, what="the first chart to show its data",
             interval=0.1)  # fmt: skip
    # A prerendered page (the project page's Speculation Rules) may have drawn its chart
    # before the click: the person sees it when the page is activated, not before.
    chart_ms, origin, activated_ms = page.evaluate(ACTIVATION)
    chart_ms = max(float(chart_ms), float(activated_ms))
    origin = float(origin)
    timing = resources(page) if trace_from_us is not None else {}
    if timing:
        timing["chart_ms"] = round(chart_ms - origin, 1)
    shown_from = max(origin, started_ms)  # a prerendered document began before the click
    return Visit((chart_ms - started_ms) / 1000, (shown_from - started_ms) / 1000,
                 (chart_ms - shown_from) / 1000, timing)  # fmt: skip


def visited(page: Page, go: Callable[[], float], trace: bool) -> Visit:
    """`go()` starts the visit and says when (epoch ms); traced, with the timeline's summary."""
    if not trace:
        return first_chart(page, go(), trace_from_us=None)
    with traced(page) as events:
        visit = first_chart(page, go(), trace_from_us=0.0)
    visit.breakdown.update(summarize(events))
    return visit


def visit_tbhub(hub: Tbhub, context: BrowserContext, trace: bool = False) -> Visit:
    """The project page, then a click on its "Open board"."""
    page = context.new_page()
    try:
        page.goto(f"{hub.base_url}/projects/{PROJECT}")
        # Found before the clock starts, and clicked as the page's own click event:
        # Playwright's click first checks the link is stable over two animation frames
        # (about 33 ms), a wait of the driver's that no person has.
        link = page.get_by_role("link", name="Open board").first.element_handle()

        def click() -> float:
            started_ms = time.time() * 1000
            link.evaluate("link => link.click()")
            return started_ms

        return visited(page, click, trace)
    finally:
        page.close()


def visit_bare(url: str, context: BrowserContext, trace: bool = False) -> Visit:
    page = context.new_page()
    try:

        def open_url() -> float:
            started_ms = time.time() * 1000
            page.goto(url)
            return started_ms

        return visited(page, open_url, trace)
    finally:
        page.close()


def stop_board(hub: Tbhub) -> None:
    """Stop the bench board and wait until its process is gone: the next open is cold."""
    hub.cli("admin", "board", "stop", PROJECT)
    wait_for(lambda: not list(hub.data_dir.glob("boards/*.json")), timeout=60,
             what="the bench board to stop", interval=0.1)  # fmt: skip


VIEWPORT = {"width": 1280, "height": 900}


class Visits:
    """The browser contexts of one bench: returning ones kept (each a profile on disk, or an
    incognito context), fresh ones made per visit."""

    def __init__(self, playwright: Playwright, browser: Browser, hub: Tbhub, cookie: str,
                 bare_url: str, profiles: Path | None) -> None:  # fmt: skip
        self.browser, self.hub, self.cookie, self.bare_url = browser, hub, cookie, bare_url
        self.returning = {
            target: self.prepared(self.returning_context(playwright, target, profiles))
            for target in ("tbhub", "bare")
        }

    def returning_context(self, playwright: Playwright, target: str, profiles: Path | None
                          ) -> BrowserContext:  # fmt: skip
        if profiles is None:
            return self.browser.new_context(viewport=VIEWPORT)
        return playwright.chromium.launch_persistent_context(
            profiles / target, executable_path=CHROMIUM, args=CHROMIUM_ARGS, viewport=VIEWPORT
        )

    def prepared(self, context: BrowserContext) -> BrowserContext:
        context.add_init_script(CHART_WATCH)
        context.add_cookies([{"name": "tbhub_session", "value": self.cookie,
                              "url": self.hub.base_url}])  # fmt: skip
        return context

    def fresh(self, visit: Callable[[BrowserContext], Visit]) -> Visit:
        context = self.prepared(self.browser.new_context(viewport=VIEWPORT))
        try:
            return visit(context)
        finally:
            context.close()

    def round(self, index: int, *, trace: bool = False) -> list[Sample]:
        tbhub = lambda context: visit_tbhub(self.hub, context, trace)  # noqa: E731
        bare = lambda context: visit_bare(self.bare_url, context, trace)  # noqa: E731
        visits: dict[str, Visit] = {}
        visits["bare_fresh"] = self.fresh(bare)
        visits["bare_returning"] = bare(self.returning["bare"])
        visits["warm_fresh"] = self.fresh(tbhub)
        visits["warm_returning"] = tbhub(self.returning["tbhub"])
        stop_board(self.hub)
        visits["cold_fresh"] = self.fresh(tbhub)
        stop_board(self.hub)
        visits["cold_returning"] = tbhub(self.returning["tbhub"])
        return [Sample(kind, index, v.seconds, round(v.wait_s, 3), round(v.page_s, 3),
                       v.breakdown) for kind, v in ((k, visits[k]) for k in KINDS)]  # fmt: skip

    def close(self) -> None:
        for context in self.returning.values():
            context.close()


def sample_and_bare(work: Path) -> tuple[Path, Group, str]:
    """The sample logdir as the bench project of a storage root under `work`, and a bare
    TensorBoard on a copy of it, listing every run: the storage root, its process group and
    its URL."""
    storage, names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
    bare_logdir = work / "bare"
    shutil.copytree(storage / PROJECT, bare_logdir)
    port = free_port()
    bare, _ = ready_bare_tensorboard(bare_logdir, names, work / "tensorboard.log",
                                     timeout=120, port=port)  # fmt: skip
    return storage, bare, f"http://{HOST}:{port}/"


def run(repeats: int, warmup: int, *, breakdown: bool, returning: str
        ) -> tuple[list[Sample], list[Sample]]:  # fmt: skip
    """The measured samples, and those of the traced round (with --breakdown)."""
    with temp_dir("tbhub-bench-first-chart.") as work:
        storage, bare, bare_url = sample_and_bare(work)
        hub = Tbhub(root=work / "tbhub", storage_root=storage)
        try:
            with hub.serving(), sync_playwright() as playwright:
                cookie = hub.sign_in()
                hub.wait_for_board(cookie, "data/runs")
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                profiles = work / "profiles" if returning == "profile" else None
                visits = Visits(playwright, browser, hub, cookie, bare_url, profiles)
                try:
                    samples = measure_rounds(repeats, max(warmup, 1),
                                             lambda i, _l: visits.round(i),
                                             lambda s: f"{s.kind} {s.seconds:.2f}s")  # fmt: skip
                    traced_round = visits.round(0, trace=True) if breakdown else []
                    return samples, traced_round
                finally:
                    visits.close()
                    browser.close()
        finally:
            bare.stop()


BREAKDOWN_FIELDS = ("html_ms", "script_ms", "script_bytes", "first_data_ms", "chart_ms",
                    "compile_ms", "evaluate_ms", "scripting_ms", "style_layout_ms",
                    "code_cache_consumed", "cached", "requests")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5, warmup=1)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="one more round under Chromium's tracing: where the time goes",
    )
    parser.add_argument("--returning", choices=("profile", "incognito"), default="profile",
                        help="returning visits in a profile on disk (V8's code cache) or an "
                        "incognito context (none)")  # fmt: skip
    args = parser.parse_args(argv)
    samples, traced_round = run(args.runs, args.warmup, breakdown=args.breakdown,
                                returning=args.returning)  # fmt: skip
    median_s = medians(samples, KINDS, lambda s: s.seconds)
    wait_s = medians(samples, KINDS, lambda s: s.wait_s)
    page_s = medians(samples, KINDS, lambda s: s.page_s)
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
        + "; split wait+page: "
        + ", ".join(f"{kind} {wait_s[kind]:.2f}+{page_s[kind]:.2f}s" for kind in KINDS)
        + f" (returning: {args.returning})"
    )
    breakdown = {s.kind: s.breakdown for s in traced_round}
    if args.json:
        emit_report("first_chart", data=DATA, samples=samples, median_s=median_s, n=args.runs,
                    wait_s=wait_s, page_s=page_s, ratios=ratios, met=met, summary=summary,
                    returning=args.returning, breakdown=breakdown)  # fmt: skip
        return 0
    for index in range(1, args.runs + 1):
        row = {s.kind: s.seconds for s in samples if s.index == index}
        print(f"{index:>4} " + " ".join(f"{kind} {row[kind]:.2f}s" for kind in KINDS))
    for kind, values in breakdown.items():
        print(f"{kind:>15} " + " ".join(f"{name}={values.get(name)}" for name in BREAKDOWN_FIELDS))
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
