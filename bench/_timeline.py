"""What a page spent its time on, from Chromium's own performance timeline: a trace of the
page's renderer (DevTools' timeline and V8 categories, over CDP) and the page's resource
timing. For bench/first_chart.py: network, parse/compile, execution and the first data
fetch of TensorBoard's page, and whether V8's code cache served its big script."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from playwright.sync_api import CDPSession, Page

CATEGORIES = ["devtools.timeline", "v8", "v8.execute", "disabled-by-default-devtools.timeline",
              "blink.user_timing", "loading"]  # fmt: skip
SCRIPT = "index.js"  # TensorBoard's one big script (about 6 MB)
# Top-level JavaScript work on the renderer's main thread (their union: some nest).
SCRIPTING = {"EvaluateScript", "v8.evaluateModule", "FunctionCall", "RunMicrotasks",
             "TimerFire", "FireAnimationFrame", "EventDispatch", "XHRReadyStateChange"}  # fmt: skip
STYLE_LAYOUT = {"UpdateLayoutTree", "Layout", "RecalculateStyles", "PrePaint", "Paint"}

# Offsets from the document's time origin, in ms, from its resource timing.
RESOURCES = """
(() => {
  const all = performance.getEntriesByType("resource");
  const nav = performance.getEntriesByType("navigation")[0];
  const script = all.find((e) => new URL(e.name).pathname.endsWith("/index.js"));
  const data = all.filter((e) => new URL(e.name).pathname.includes("/data/"));
  return {
    origin: performance.timeOrigin,
    html_ms: nav ? nav.responseEnd : null,
    html_bytes: nav ? nav.transferSize : null,
    script_start_ms: script ? script.startTime : null,
    script_ms: script ? script.responseEnd : null,
    script_bytes: script ? script.transferSize : null,
    first_data_ms: data.length ? Math.min(...data.map((e) => e.startTime)) : null,
    data_requests: data.length,
    cached: all.filter((e) => e.transferSize === 0).length,
    requests: all.length,
  };
})()
"""


@contextmanager
def traced(page: Page) -> Iterator[list[dict[str, Any]]]:
    """Trace the browser while the block runs; the events are in the yielded list after."""
    session = page.context.new_cdp_session(page)
    events: list[dict[str, Any]] = []
    session.send("Tracing.start", {"transferMode": "ReturnAsStream",
                                   "traceConfig": {"includedCategories": CATEGORIES}})  # fmt: skip
    try:
        yield events
    finally:
        events += _end(page, session)
        session.detach()


def _end(page: Page, session: CDPSession) -> list[dict[str, Any]]:
    done: list[str] = []
    session.on("Tracing.tracingComplete", lambda params: done.append(params["stream"]))
    session.send("Tracing.end")
    for _ in range(600):
        if done:
            break
        page.wait_for_timeout(50)
    if not done:
        raise RuntimeError("Chromium did not hand over its trace")
    return read_trace(session.send, done[0])


def read_trace(send: Callable[[str, dict[str, Any]], Any], handle: str) -> list[dict[str, Any]]:
    """The events of a trace Chromium handed over as the stream `handle`, read through a
    DevTools `send(method, params)`."""
    chunks = []
    while True:
        read = send("IO.read", {"handle": handle})
        chunks.append(read["data"])
        if read.get("eof"):
            break
    send("IO.close", {"handle": handle})
    trace = json.loads("".join(chunks))
    return list(trace["traceEvents"] if isinstance(trace, dict) else trace)


def _union_ms(spans: Iterable[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total / 1000


def _url(event: dict[str, Any]) -> str:
    data = event.get("args", {}).get("data") or event.get("args", {})
    return str(data.get("url") or data.get("fileName") or "")


def _of_script(event: dict[str, Any], names: Iterable[str], since_us: float) -> bool:
    url = _url(event).split("?")[0]
    return event.get("name") in names and url.endswith(SCRIPT) and event.get("ts", 0) >= since_us


def _busy_ms(events: Iterable[dict[str, Any]], names: set[str]) -> float:
    spans = ((e["ts"], e["ts"] + e.get("dur", 0)) for e in events if e.get("name") in names)
    return round(_union_ms(spans), 1)


def summarize(events: list[dict[str, Any]], since_us: float = 0.0) -> dict[str, Any]:
    """For the main thread that evaluated TensorBoard's script, after `since_us` (trace
    clock): its compile and evaluation, the union of all JavaScript and of style and layout,
    and whether the script's compile consumed V8's code cache."""
    evaluations = [e for e in events if _of_script(e, ("EvaluateScript",), since_us)]
    if not evaluations:
        return {"found": False}
    last = evaluations[-1]
    mine = [
        e for e in events
        if (e.get("pid"), e.get("tid")) == (last["pid"], last["tid"])
        and e.get("ph") == "X" and e.get("ts", 0) >= last["ts"]
    ]  # fmt: skip
    compiles = [e for e in events if _of_script(e, ("v8.compile", "v8.compileModule"), since_us)]
    cache = [e.get("args", {}).get("data", {}) for e in compiles]
    return {
        "found": True,
        "compile_ms": round(sum(e.get("dur", 0) for e in compiles) / 1000, 1),
        "evaluate_ms": round(last.get("dur", 0) / 1000, 1),
        "code_cache_consumed": any(
            (d.get("consumedCacheSize") or 0) > 0 and not d.get("cacheRejected") for d in cache
        ),
        "code_cache_produced": any(e.get("name") == "v8.produceCache" for e in events),
        "streamed": any(d.get("streamed") for d in cache),
        "scripting_ms": _busy_ms(mine, SCRIPTING),
        "style_layout_ms": _busy_ms(mine, STYLE_LAYOUT),
    }


def resources(page: Page) -> dict[str, Any]:
    return dict(page.evaluate(RESOURCES))
