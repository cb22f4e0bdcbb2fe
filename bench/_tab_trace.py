"""Where an instant click's time goes, for bench/first_chart_tab.py --breakdown: Chromium's
trace of the whole browser over the tab-aware driver's connection (the prerendered page's
renderer too, which a page-attached trace would miss), and the shown page's resource
timing, as steps in ms from the click: the document, TensorBoard's index.js, its compile
and evaluation (and whether V8's code cache served the compile), the first and last data
requests before the chart's `timeSeries`, `timeSeries` itself, and the chart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import _places  # noqa: F401  first of the harness: it puts the repository root on sys.path
from _timeline import CATEGORIES, read_trace, summarize

from tests.support.tab_cdp import Browser, CdpError, Tab  # isort: skip (needs _places first)

# The shown page's timing (ms from its time origin) and where its origin and activation are.
TIMING = """
(() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const all = performance.getEntriesByType("resource")
    .filter((e) => e.initiatorType !== "other")  // a worker's script: another time origin
    .map((e) => ({path: new URL(e.name).pathname, start: e.startTime, end: e.responseEnd,
                  bytes: e.transferSize}));
  return {origin: performance.timeOrigin, activation: nav.activationStart || 0,
          document: [nav.requestStart, nav.responseStart, nav.responseEnd],
          content_loaded: nav.domContentLoadedEventEnd, resources: all};
})()
"""


@contextmanager
def browser_traced(browser: Browser) -> Iterator[list[dict[str, Any]]]:
    """Trace every process of the browser while the block runs; the events after it."""
    events: list[dict[str, Any]] = []
    connection = browser.connection
    done: list[str] = []

    def on_complete(message: dict[str, Any]) -> None:
        if message.get("method") == "Tracing.tracingComplete":
            done.append(message["params"]["stream"])

    connection.listeners.append(on_complete)
    config = {"includedCategories": CATEGORIES}
    connection.send("Tracing.start", {"transferMode": "ReturnAsStream", "traceConfig": config})
    try:
        yield events
    finally:
        connection.send("Tracing.end")
        deadline = time.monotonic() + 60
        while not done:
            if time.monotonic() > deadline:
                raise CdpError("Chromium did not hand over its trace")
            time.sleep(0.05)
        connection.listeners.remove(on_complete)
        events += read_trace(connection.send, done[0])


def steps(tab: Tab, clicked_ms: float, chart_s: float) -> dict[str, Any]:
    """The shown page's steps in ms from the click (negative: before it, in a prerender)."""
    timing = tab.evaluate(TIMING)
    at = lambda ms: round(timing["origin"] + ms - clicked_ms)  # noqa: E731
    resources = timing["resources"]

    def span(match: str) -> list[int] | None:
        found = [r for r in resources if r["path"].endswith(match)]
        return [at(found[0]["start"]), at(found[0]["end"])] if found else None

    series = [r for r in resources if r["path"].endswith("/timeSeries")]
    before = [r for r in resources if "/data/" in r["path"]
              and (not series or r["start"] < series[0]["start"])]  # fmt: skip
    return {
        "document_started": at(0),
        "activated": at(timing["activation"]),
        "document": [at(t) for t in timing["document"]],
        "index_js": span("/index.js"),
        "index_js_bytes": next(
            (r["bytes"] for r in resources if r["path"].endswith("/index.js")), None
        ),
        "first_data": [at(min(r["start"] for r in before)), at(max(r["end"] for r in before))]
        if before
        else None,
        "time_series": [at(series[0]["start"]), at(max(r["end"] for r in series))]
        if series
        else None,
        "content_loaded": at(timing["content_loaded"]),
        "chart": round(chart_s * 1000),
    }


def breakdown(tab: Tab, clicked_ms: float, chart_s: float, events: list[dict[str, Any]]
              ) -> dict[str, Any]:  # fmt: skip
    return {**steps(tab, clicked_ms, chart_s), **summarize(events)}
