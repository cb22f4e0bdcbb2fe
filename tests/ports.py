"""Ports the tests choose for servers they start.

A port taken from the kernel (`bind(("127.0.0.1", 0))`) and released is free only until
someone else asks: another pytest worker, or a board the kernel also gives ports from its
ephemeral range, may get it before our server binds it, and the test then talks to a
stranger. So each worker draws from its own slice of the ports below the ephemeral range
(which starts at 32768 here and on Linux by default), walking it in order and skipping a
port something already holds. Test runs side by side on one host (say, in two worktrees)
each set TBHUB_TEST_PORTS to a range of their own, as `FIRST-LAST`.
"""

from __future__ import annotations

import itertools
import os
import socket

FIRST, LAST = 10_000, 32_000  # below the kernel's ephemeral range
# Ports Chromium refuses to load a page from (net::ERR_UNSAFE_PORT), those above 1023 of its
# restricted list: a browser test's server must never be given one.
BROWSER_UNSAFE = frozenset({1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566,
                            *range(6665, 6670), 6679, 6697, 10080})  # fmt: skip


def _bounds() -> tuple[int, int]:
    first, _, last = os.environ.get("TBHUB_TEST_PORTS", f"{FIRST}-{LAST}").partition("-")
    return int(first), int(last)


def _slice() -> range:
    first, last = _bounds()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    width = (last - first) // max(count, index + 1)
    start = first + index * width
    return range(start, start + width)


_SLICE = _slice()
_candidates = itertools.cycle(_SLICE)


def free_port() -> int:
    """A loopback port of this worker's slice that nothing listens on now."""
    for _ in range(len(_SLICE)):
        port = next(_candidates)
        if port in BROWSER_UNSAFE:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("every port of this worker's slice is taken; stop stray test servers")
