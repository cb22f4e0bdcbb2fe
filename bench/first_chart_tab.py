"""Time to first chart with the project page's prerender at work: bench/first_chart.py's warm
and bare visits, in Chromium driven tab-aware over DevTools (tests/support/tab_cdp.py), since under
Playwright Chromium prerenders nothing (it refuses for a page with a session attached to the
page target directly).

The same `tbhub serve` and bare TensorBoard over the standard sample logdir as
bench/first_chart.py, and the same clock: from the click (here `link.click()` in the page) to
the first scalar card's y axis showing the data's range, settled for a second; a prerendered
page is counted from its activation at the earliest (a chart drawn while the page was
hidden is seen when it is shown). Each round, in a fresh profile (a new incognito context)
and in a returning one (a profile on disk per target):

- cold: the board stopped first (bench/first_chart.py's `stop_board`), then the click on
  "Open board": no prerender (the project page asks for none of a stopped board), the gate
  starts the board and holds the click until it serves;
- warm: the click on "Open board", which the project page has asked Chromium to prerender;
- warm_noprerender: the same page reached by a URL the rules do not name (`?nr`): what the
  click cost before the prerender, in the same run;
- bare: the bare TensorBoard's URL opened directly.

Targets (issue 19): cold <= 1.2x warm; warm <= 0.8x bare in a fresh profile, <= 0.5x bare in
a returning one.

With `--breakdown`, one more visit of each warm and bare kind runs under Chromium's tracing
(of the whole browser: the prerendered page's renderer too; bench/_tab_trace.py) and
reports its steps in ms from the click, negative for what a prerender did before it: the
document, index.js asked and received, the data requests before `timeSeries`, `timeSeries`,
the chart; and index.js's compile and evaluation and whether V8's code cache served it.

    .venv/bin/python bench/first_chart_tab.py [--runs 5] [--warmup 1] [--dwell 0]
        [--breakdown] [--json]

The click comes `--dwell` seconds (default 1) after the project page's load event.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _places import PROJECT, free_port
from _processes import temp_dir
from _reports import arguments, emit_report, measure_rounds, medians
from _tab_trace import breakdown, browser_traced
from _tbhub import Tbhub
from first_chart import (
    ACTIVATION,
    CHART_WATCH,
    CHROMIUM,
    CHROMIUM_ARGS,
    DATA,
    EMPTY_AXIS,
    SETTLED_S,
    sample_and_bare,
    stop_board,
)

from tests.support.tab_cdp import Browser, CdpError, Tab  # isort: skip (needs _places first)

TIMEOUT_S = 120.0
KINDS = tuple(f"{target}_{profile}" for profile in ("fresh", "returning")
              for target in ("cold", "warm", "warm_noprerender", "bare"))  # fmt: skip
TARGETS = (
    ("cold_fresh", "warm_fresh", 1.2),
    ("cold_returning", "warm_returning", 1.2),
    ("warm_fresh", "bare_fresh", 0.8),
    ("warm_returning", "bare_returning", 0.5),
)
# --dwell: seconds on the loaded project page before the click. A quick person's: the page
# seen, "Open board" found, the pointer moved onto it (docs/first-chart.md).
DEFAULT_DWELL_S = 1.0
DWELL_S = DEFAULT_DWELL_S
LINK = "document.querySelector('a[data-opens=whole-project]')"


@dataclass
class Sample:
    kind: str
    index: int
    seconds: float
    prerendered: bool
    breakdown: dict[str, Any] = field(default_factory=dict)


def chart_seconds(tab: Tab, started_ms: float, board_path: str) -> tuple[float, bool]:
    """From `started_ms` (epoch) to the first chart shown with its data; and whether the page
    shown was prerendered."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            path, axis, at = tab.evaluate("[location.pathname, window.__axis, window.__firstChart]")
        except CdpError:  # between documents
            path, axis, at = "", "", None
        if (path == board_path and at and axis != EMPTY_AXIS
                and time.time() * 1000 - max(at, started_ms) >= SETTLED_S * 1000):  # fmt: skip
            chart_ms, origin, shown_ms = tab.evaluate(ACTIVATION)
            return (max(chart_ms, shown_ms) - started_ms) / 1000, shown_ms > origin
        time.sleep(0.05)
    raise TimeoutError("the first chart did not show its data")


@contextlib.contextmanager
def maybe_traced(browser: Browser, trace: bool) -> Iterator[list[dict[str, Any]]]:
    if not trace:
        yield []
        return
    with browser_traced(browser) as events:
        yield events


def visit_tbhub(browser: Browser, hub: Tbhub, cookie: str, *, incognito: bool,
                prerender: bool, trace: bool = False) -> Sample:  # fmt: skip
    tab = browser.new_tab(incognito=incognito, cookies=cookies(hub, cookie))
    try:
        # Traced from before the project page: its prerender starts while it loads.
        with maybe_traced(browser, trace) as events:
            tab.navigate(f"{hub.base_url}/projects/{PROJECT}")
            time.sleep(DWELL_S)
            started_ms = time.time() * 1000
            tab.evaluate(f"{LINK}.click()" if prerender
                         else f"location.href = {LINK}.href + '?nr'")  # fmt: skip
            seconds, prerendered = chart_seconds(tab, started_ms, f"/boards/{PROJECT}/")
        steps = breakdown(tab, started_ms, seconds, events) if trace else {}
        return Sample("", 0, seconds, prerendered, steps)
    finally:
        tab.close()


def visit_bare(browser: Browser, url: str, *, incognito: bool, trace: bool = False) -> Sample:
    tab = browser.new_tab(incognito=incognito, cookies=[])
    try:
        with maybe_traced(browser, trace) as events:
            started_ms = time.time() * 1000
            tab.send("Page.navigate", {"url": url}, session=tab.shown_page())
            seconds, prerendered = chart_seconds(tab, started_ms, "/")
        steps = breakdown(tab, started_ms, seconds, events) if trace else {}
        return Sample("", 0, seconds, prerendered, steps)
    finally:
        tab.close()


def cookies(hub: Tbhub, cookie: str) -> list[dict[str, str]]:
    return [{"name": "tbhub_session", "value": cookie, "url": hub.base_url}]


def run(repeats: int, warmup: int, *, trace: bool = False) -> tuple[list[Sample], list[Sample]]:
    """The measured samples, and those of the traced round (with --breakdown)."""
    with temp_dir("tbhub-bench-first-chart-tab.") as work:
        storage, bare, bare_url = sample_and_bare(work)
        hub = Tbhub(root=work / "tbhub", storage_root=storage)
        browsers: list[Browser] = []
        try:
            with hub.serving():
                cookie = hub.sign_in()
                hub.wait_for_board(cookie, "data/runs")

                def browser(name: str) -> Browser:
                    made = Browser(CHROMIUM, CHROMIUM_ARGS, Path(work / "profiles" / name),
                                   CHART_WATCH, port=free_port())  # fmt: skip
                    browsers.append(made)
                    return made

                fresh, tbhub_profile = browser("fresh"), browser("tbhub")
                bare_profile = browser("bare")

                def one_round(index: int, _label: str) -> list[Sample]:
                    def cold(profile: Browser, incognito: bool) -> Sample:
                        stop_board(hub)
                        return visit_tbhub(
                            profile, hub, cookie, incognito=incognito, prerender=True
                        )

                    visits = {
                        "cold_fresh": lambda: cold(fresh, True),
                        "cold_returning": lambda: cold(tbhub_profile, False),
                        "bare_fresh": lambda: visit_bare(fresh, bare_url, incognito=True),
                        "warm_fresh": lambda: visit_tbhub(fresh, hub, cookie, incognito=True,
                                                          prerender=True),
                        "warm_noprerender_fresh": lambda: visit_tbhub(
                            fresh, hub, cookie, incognito=True, prerender=False),
                        "bare_returning": lambda: visit_bare(bare_profile, bare_url,
                                                             incognito=False),
                        "warm_returning": lambda: visit_tbhub(tbhub_profile, hub, cookie,
                                                              incognito=False, prerender=True),
                        "warm_noprerender_returning": lambda: visit_tbhub(
                            tbhub_profile, hub, cookie, incognito=False, prerender=False),
                    }  # fmt: skip
                    # Alternate the order between rounds (a cold visit stops the board; its
                    # click starts it again through the gate, so the next visit finds it live).
                    order = list(visits) if index % 2 else list(reversed(visits))
                    out = []
                    for kind in order:
                        sample = visits[kind]()
                        sample.kind, sample.index = kind, index
                        out.append(sample)
                    return out

                samples = measure_rounds(repeats, max(warmup, 1), one_round,
                                         lambda s: f"{s.kind} {s.seconds:.2f}s"
                                         f"{' prerendered' if s.prerendered else ''}")  # fmt: skip
                traced = []
                if trace:
                    for kind, visit in (
                        (
                            "warm_returning",
                            lambda: visit_tbhub(
                                tbhub_profile,
                                hub,
                                cookie,
                                incognito=False,
                                prerender=True,
                                trace=True,
                            ),
                        ),
                        (
                            "bare_returning",
                            lambda: visit_bare(bare_profile, bare_url, incognito=False, trace=True),
                        ),
                        (
                            "warm_fresh",
                            lambda: visit_tbhub(
                                fresh, hub, cookie, incognito=True, prerender=True, trace=True
                            ),
                        ),
                        (
                            "bare_fresh",
                            lambda: visit_bare(fresh, bare_url, incognito=True, trace=True),
                        ),
                    ):
                        sample = visit()
                        sample.kind = kind
                        traced.append(sample)
                return samples, traced
        finally:
            for made in browsers:
                made.close()
            bare.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5, warmup=1)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="one more visit of each warm and bare kind under Chromium's tracing: its steps",
    )
    parser.add_argument(
        "--dwell",
        type=float,
        default=DEFAULT_DWELL_S,
        help=f"seconds on the loaded project page before the click (default {DEFAULT_DWELL_S:g}: "
        "a quick person; 0: a script's click at the load event)",
    )
    args = parser.parse_args(argv)
    global DWELL_S
    DWELL_S = args.dwell
    samples, traced = run(args.runs, args.warmup, trace=args.breakdown)
    median_s = medians(samples, KINDS, lambda s: s.seconds)
    ratios = {f"{a}/{b}": round(median_s[a] / median_s[b], 2) for a, b, _ in TARGETS}
    before = {f"warm_noprerender_{p}/bare_{p}": round(median_s[f"warm_noprerender_{p}"]
                                                      / median_s[f"bare_{p}"], 2)
              for p in ("fresh", "returning")}  # fmt: skip
    prerendered = {k: sum(s.prerendered for s in samples if s.kind == k) for k in KINDS}
    summary = (
        f"first_chart_tab (medians, n={args.runs}): "
        + ", ".join(f"{kind} {median_s[kind]:.2f}s" for kind in KINDS)
        + "; "
        + ", ".join(f"{name} {ratio}x (target <= {target}x: "
                    f"{'met' if ratio <= target else 'MISSED'})"
                    for (name, ratio), (_, _, target) in zip(ratios.items(), TARGETS, strict=True))
        + "; without the prerender: "
        + ", ".join(f"{name} {ratio}x" for name, ratio in before.items())
        + "; prerendered visits: "
        + ", ".join(f"{k} {n}/{args.runs}" for k, n in prerendered.items())
        + f"; dwell {args.dwell:g}s"
    )  # fmt: skip
    steps = {s.kind: s.breakdown for s in traced}
    if args.json:
        emit_report("first_chart_tab", data=DATA, samples=samples, median_s=median_s,
                    n=args.runs, ratios=ratios, before=before, summary=summary,
                    breakdown=steps)  # fmt: skip
        return 0
    for kind, values in steps.items():
        print(f"{kind:>15} " + " ".join(f"{name}={value}" for name, value in values.items()))
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
