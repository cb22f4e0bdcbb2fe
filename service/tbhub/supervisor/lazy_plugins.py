"""Plugins a board makes on their first request instead of at its start.

TensorBoard asks a plugin, before any request, for its name, its frontend metadata, its
routes and (for each plugins listing) whether it has data. `LazyPlugin` writes those down
for a pinned plugin, so that the board imports and makes the real one only when one of its
routes is first asked for. `board_process.board_plugins` uses it for the plugins in
`LAZY_PLUGINS`. Only the standard library is imported here (the board image holds this
module beside the launcher); TensorBoard's modules are imported when a loader is made.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_FAILURE = 500  # characters of a load failure a route's answer repeats
Report = Callable[[str, BaseException], None]  # board_process.report_plugin_error


@dataclass(frozen=True)
class LazyPlugin:
    """What TensorBoard asks of a plugin before its first request, written down so that the
    plugin is imported and made on that request instead of at the board's start. Its loader
    must define no flags and its routes must be exactly these (a test checks the pin's)."""

    plugin_name: str
    es_module_path: str
    disable_reload: bool
    routes: tuple[str, ...]
    data_file: str  # a regular expression: a file so named under the logdir is its data


# The PyTorch profiler's import pulls in pandas, and making it starts a multiprocessing
# Manager by spawn (a second Python): a board that turned it on but is not profiled pays
# neither, and one that is pays on the first request of the profiler's tab.
LAZY_PLUGINS = {
    "torch_profiler": LazyPlugin(
        "pytorch_profiler", "/index.js", True,
        ("/index.js", "/index.html", "/trace_viewer_full.html", "/trace_embedding.html",
         "/runs", "/views", "/workers", "/spans", "/overview", "/operation",
         "/operation/table", "/operation/stack", "/kernel", "/kernel/table", "/kernel/tc_pie",
         "/trace", "/distributed/gpuinfo", "/distributed/overlap", "/distributed/waittime",
         "/distributed/commops", "/memory", "/memory_curve", "/memory_events", "/module",
         "/tree", "/diff", "/diffnode"),
        r".+\.pt\.trace\.json(?:\.gz)?",
    ),
}  # fmt: skip
DATA_CHECK_SECONDS = 10.0  # a lazy plugin's "no data" answer is kept this long
DATA_CHECK_ENTRIES = 100_000  # entries looked at, at most; past them the plugin is offered
FIRST_SCAN_SECONDS = 2.0  # how long a first request waits for the plugin to see its data


def has_data_file(logdir: str, pattern: re.Pattern[str], limit: int = DATA_CHECK_ENTRIES) -> bool:
    """Whether a file whose name matches `pattern` lies under `logdir` (symlinks not
    followed); True also when `limit` entries were looked at without an answer."""
    seen = 0
    for _root, dirs, files in os.walk(logdir):
        if any(pattern.fullmatch(name) for name in files):
            return True
        seen += len(dirs) + len(files)
        if seen > limit:
            return True
    return False


def lazy_loader(entry_point: Any, lazy: LazyPlugin, *, report: Report) -> Any:
    """A TensorBoard loader for the plugin `entry_point` names that imports and makes it on
    its first request (`LazyPlugin`). A failure then is reported like a failure at start,
    and its routes answer 500 saying so."""
    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug import wrappers

    class DeferredPlugin(base_plugin.TBPlugin):
        plugin_name = lazy.plugin_name

        def __init__(self, context: Any) -> None:
            self.context = context
            self.real: Any = None
            self.apps: dict[str, Any] = {}
            self.failure: str | None = None
            self.lock = threading.Lock()
            self.pattern = re.compile(lazy.data_file)
            self.data_checked = (-DATA_CHECK_SECONDS, False)  # (when, found)

        def get_plugin_apps(self) -> dict[str, Any]:
            return {route: functools.partial(self.serve, route) for route in lazy.routes}

        def frontend_metadata(self) -> Any:
            return base_plugin.FrontendMetadata(
                es_module_path=lazy.es_module_path, disable_reload=lazy.disable_reload
            )

        def is_active(self) -> bool:
            if self.real is not None:
                return bool(self.real.is_active())
            return self.failure is None and self.has_data()

        def has_data(self) -> bool:
            when, found = self.data_checked
            if not found and time.monotonic() - when >= DATA_CHECK_SECONDS:
                found = has_data_file(self.context.logdir, self.pattern)
                self.data_checked = (time.monotonic(), found)
            return found

        def loaded(self) -> Any:
            with self.lock:
                if self.real is None and self.failure is None:
                    try:
                        loader = application.make_plugin_loader(entry_point.load())
                        self.real = loader.load(self.context)
                        self.apps = self.real.get_plugin_apps()
                    except Exception as exc:  # a broken package must not take the board down
                        report(entry_point.name, exc)
                        self.failure = f"{type(exc).__name__}: {exc}"[:MAX_FAILURE]
                    else:  # its runs are found by a thread it starts: give that a moment
                        deadline = time.monotonic() + FIRST_SCAN_SECONDS
                        while self.has_data() and not self.real.is_active():
                            if time.monotonic() > deadline:
                                break
                            time.sleep(0.05)
            return self.real

        def serve(self, route: str, environ: Any, start_response: Any) -> Any:
            real = self.loaded()
            if real is None:
                answer = wrappers.Response(
                    f"the plugin {entry_point.name} failed to load: {self.failure}",
                    status=500, content_type="text/plain; charset=utf-8",
                )  # fmt: skip
                return answer(environ, start_response)
            return self.apps[route](environ, start_response)

    class DeferredLoader(base_plugin.TBLoader):
        def load(self, context: Any) -> Any:
            return DeferredPlugin(context)

    return DeferredLoader()
