"""Chromium driven over its DevTools protocol the way a tab-aware client attaches: to each tab
target first, then to the pages inside it. Playwright attaches to page targets directly, and
Chromium prerenders nothing for a page with such a session (devtools_instrumentation.cc,
IsPrerenderAllowed: HasSessionsWithoutTabTargetSupport), so Speculation Rules would never
act under it.

One Chromium process per profile directory (a returning profile keeps its cache and V8's code
cache there); `new_tab(incognito=True)` opens a tab in a new incognito context of it (a fresh
profile). Every page of a tab, a prerendered one too, runs `init_script` before its own
scripts (the first chart's watcher). bench/first_chart_tab.py measures through it, and
tests/e2e/test_board_prerender.py checks through it what the project page's prerender does."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import ClientConnection, connect

HOST = "127.0.0.1"
TIMEOUT = 60.0
# What a page must have taken for its visit to count (its chart watcher among them).
NEEDED = ("Page.enable", "Page.addScriptToEvaluateOnNewDocument")


class CdpError(RuntimeError):
    pass


class Connection:
    """One websocket to the browser; flat sessions; replies by id, events to listeners."""

    def __init__(self, url: str) -> None:
        self.opened = contextlib.ExitStack()  # websockets wants its connection entered
        self.socket: ClientConnection = self.opened.enter_context(
            connect(url, max_size=None, open_timeout=TIMEOUT)
        )
        self.lost: BaseException | None = None  # what stopped the reader, said by each wait
        self.ids = itertools.count(1)
        self.waiting: dict[int, queue.Queue[dict[str, Any]]] = {}
        self.listeners: list[Callable[[dict[str, Any]], None]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        try:
            for raw in self.socket:
                message = json.loads(raw)
                if "id" in message:
                    with self.lock:
                        box = self.waiting.pop(message["id"], None)
                    if box is not None:
                        box.put(message)
                else:
                    for listener in list(self.listeners):
                        listener(message)
        except Exception as exc:  # the browser went away: pending calls time out, saying so
            self.lost = exc

    def post(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | None = None) -> queue.Queue[dict[str, Any]]:  # fmt: skip
        """Send without waiting; the reply comes into the returned queue."""
        ident = next(self.ids)
        box: queue.Queue[dict[str, Any]] = queue.Queue(1)
        with self.lock:
            self.waiting[ident] = box
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.socket.send(json.dumps(message))
        return box

    def reply(self, box: queue.Queue[dict[str, Any]], method: str, timeout: float = TIMEOUT
              ) -> dict[str, Any]:  # fmt: skip
        try:
            reply = box.get(timeout=timeout)
        except queue.Empty:
            lost = f" (the connection was lost: {self.lost!r})" if self.lost else ""
            raise CdpError(f"{method}: no answer within {timeout}s{lost}") from None
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    def send(self, method: str, params: dict[str, Any] | None = None, *,
             session: str | None = None, timeout: float = TIMEOUT) -> dict[str, Any]:  # fmt: skip
        return self.reply(self.post(method, params, session=session), method, timeout)

    def close(self) -> None:
        self.opened.close()


@dataclass
class Tab:
    """A tab and the pages attached inside it (its own page, and any prerendered one)."""

    browser: Browser
    session: str  # the tab target's session
    context_id: str | None
    pages: dict[str, str] = field(default_factory=dict)  # page session -> target id
    prerender_status: list[str] = field(default_factory=list)

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str
             ) -> dict[str, Any]:  # fmt: skip
        return self.browser.connection.send(method, params, session=session)

    def evaluate(self, expression: str, *, session: str | None = None) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True},
                           session=session or self.shown_page())  # fmt: skip
        if "exceptionDetails" in result:
            raise CdpError(f"{expression[:60]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def shown_page(self) -> str:
        """The session of the page this tab shows now (not one prerendering)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            for session in list(self.pages):
                try:
                    hidden = self.browser.connection.send(
                        "Runtime.evaluate",
                        {"expression": "document.prerendering", "returnByValue": True},
                        session=session, timeout=5,
                    )["result"].get("value")  # fmt: skip
                except CdpError:
                    continue
                if hidden is False:
                    return session
            time.sleep(0.02)
        raise CdpError("no page shown in the tab")

    def navigate(self, url: str) -> None:
        session = self.shown_page()
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_loaded(url)

    def wait_loaded(self, url: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                here, state = self.evaluate("[location.href, document.readyState]")
            except CdpError:
                here, state = "", ""
            if here.split("#")[0] == url and state == "complete":
                return
            time.sleep(0.02)
        raise CdpError(f"{url} did not load")

    def close(self) -> None:
        connection = self.browser.connection
        for target in list(self.pages.values()):
            with contextlib.suppress(CdpError):  # gone with its tab already
                connection.send("Target.closeTarget", {"targetId": target})
        if self.context_id is not None:
            connection.send("Target.disposeBrowserContext", {"browserContextId": self.context_id})


class Browser:
    """A Chromium process with a profile directory, driven tab-aware over CDP."""

    def __init__(self, chromium: str, args: list[str], profile: Path, init_script: str, *,
                 port: int) -> None:  # fmt: skip
        """Chromium with its DevTools on `port` of 127.0.0.1 (the caller's free port)."""
        self.init_script = init_script
        self.tabs: dict[str, Tab] = {}  # tab session -> tab
        self.errors: list[str] = []  # what preparing a page failed on
        # Pages attached in a tab not opened by new_tab yet: target id -> (tab session, event).
        self.unclaimed: dict[str, tuple[str, dict[str, Any]]] = {}
        profile.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [chromium, "--headless", f"--remote-debugging-port={port}",
             f"--remote-debugging-address={HOST}", f"--user-data-dir={profile}",
             "--window-size=1280,900", *args, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        try:  # nothing left running if the DevTools connection fails
            self.connection = Connection(self._browser_url(port))
            self.connection.listeners.append(self._on_event)
            # Attach to tabs, not pages: pages are attached through their tab (Tab.pages).
            self.connection.send("Target.setAutoAttach", {
                "autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True,
                "filter": [{"type": "tab"}],
            })  # fmt: skip
        except BaseException:
            self._kill()
            raise

    def _browser_url(self, port: int) -> str:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                return str(httpx.get(f"http://{HOST}:{port}/json/version").json()
                           ["webSocketDebuggerUrl"])  # fmt: skip
            except (httpx.HTTPError, ValueError, KeyError):
                time.sleep(0.1)
        raise CdpError("Chromium did not open its DevTools port")

    def _on_event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        parent = message.get("sessionId")
        if method == "Target.attachedToTarget" and params["targetInfo"]["type"] == "tab":
            # Its pages are attached through it, paused until prepared (_prepare_page).
            threading.Thread(target=self._attach_pages, args=(params["sessionId"],),
                             daemon=True).start()  # fmt: skip
        elif method == "Target.attachedToTarget" and params["targetInfo"]["type"] == "page":
            tab = self.tabs.get(parent or "")
            if tab is None:
                self.unclaimed[params["targetInfo"]["targetId"]] = (parent or "", params)
            else:
                threading.Thread(target=self._prepare_page, args=(tab, params), daemon=True).start()
        elif method == "Target.detachedFromTarget" and parent in self.tabs:
            self.tabs[parent].pages.pop(params["sessionId"], None)
        elif method == "Preload.prerenderStatusUpdated" and parent is not None:
            for tab in self.tabs.values():
                if parent in tab.pages:
                    tab.prerender_status.append(str(params.get("prerenderStatus") or
                                                    params.get("status")))  # fmt: skip

    def _attach_pages(self, tab_session: str) -> None:
        with contextlib.suppress(CdpError):  # a tab closing meanwhile
            self.connection.send("Target.setAutoAttach", {
                "autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True,
            }, session=tab_session)  # fmt: skip

    def _prepare_page(self, tab: Tab, params: dict[str, Any]) -> None:
        session = params["sessionId"]
        # A paused target answers only once it runs: ask everything, let it run, then read.
        asked = [(method, self.connection.post(method, body, session=session))
                 for method, body in (("Page.enable", {}), ("Preload.enable", {}),
                                      ("Page.addScriptToEvaluateOnNewDocument",
                                       {"source": self.init_script}),
                                      ("Runtime.runIfWaitingForDebugger", {}))]  # fmt: skip
        prepared = True
        for method, box in asked:
            try:
                self.connection.reply(box, method)
            except CdpError as exc:
                prepared = prepared and method not in NEEDED
                self.errors.append(f"{params['targetInfo'].get('subtype', 'page')}: {exc}")
        if prepared:
            tab.pages[session] = params["targetInfo"]["targetId"]

    def new_tab(self, *, incognito: bool, cookies: list[dict[str, Any]]) -> Tab:
        context_id = None
        if incognito:
            context_id = self.connection.send("Target.createBrowserContext")["browserContextId"]
        where = {"browserContextId": context_id} if context_id else {}
        self.connection.send("Storage.setCookies", {"cookies": cookies, **where})
        target = self.connection.send("Target.createTarget", {"url": "about:blank", **where})
        deadline = time.monotonic() + TIMEOUT
        while (claimed := self.unclaimed.pop(target["targetId"], None)) is None:
            if time.monotonic() > deadline:
                raise CdpError("the new tab's page was not attached")
            time.sleep(0.01)
        session, attached = claimed
        tab = Tab(self, session, context_id)
        self.tabs[session] = tab
        self._prepare_page(tab, attached)
        return tab

    def close(self) -> None:
        with contextlib.suppress(CdpError):  # it may close before it answers
            self.connection.send("Browser.close", timeout=10)
        self.connection.close()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._kill()

    def _kill(self) -> None:
        """The browser's process group (its own session: start_new_session)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
