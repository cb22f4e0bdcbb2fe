"""An open-loop paced load, as wrk2 does it: `connections` keep-alive HTTP/1.1 connections
share a fixed schedule of `rate` requests a second, and each request's latency is counted
from the time the schedule meant to send it, not from when it went out.

A closed loop (send, wait for the answer, pause, send again) hides a slow server: while
one answer is late, the requests that should have gone out meanwhile are never sent, so
they are never counted late ("coordinated omission"). Here connection c sends its k-th
request at t0 + (c + k * connections) / rate, or at once if it is behind; a request sent
late carries the lateness in its latency.

The client is asyncio on raw sockets (no HTTP library in the loop): at a few hundred
requests a second it takes a few percent of one core.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

TIMEOUT_S = 30.0  # an answer later than this counts as failed, as with `wrk --timeout 30s`
GRACE_S = 5.0  # after the run's end, no request is sent any more


@dataclass
class PacedReport:
    """What a paced run saw: latencies (ms, from the intended send time) of 2xx answers,
    and how many requests failed: another status, no answer within TIMEOUT_S, a broken
    connection, or never sent because the run was over (GRACE_S after its end)."""

    offered_per_s: float
    seconds: float
    latencies_ms: list[float] = field(default_factory=list)
    failed: int = 0  # answered with another status, timed out or broke
    unsent: int = 0  # due, but still unsent when the run was over
    statuses: dict[int, int] = field(default_factory=dict)

    @property
    def completed(self) -> int:
        return len(self.latencies_ms) + self.failed

    @property
    def per_second(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def percentile_ms(self, percent: float) -> float:
        """The nearest-rank percentile of the 2xx latencies (inf when there are none)."""
        if not self.latencies_ms:
            return float("inf")
        ordered = sorted(self.latencies_ms)
        rank = max(0, min(len(ordered) - 1, round(percent / 100 * len(ordered) + 0.5) - 1))
        return ordered[rank]

    @property
    def failures(self) -> str:
        others = {code: n for code, n in self.statuses.items() if not 200 <= code < 300}
        if not self.failed and not self.unsent:
            return "no errors"
        return f"{self.failed + self.unsent} failed ({self.unsent} never sent) {others}"


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Read one response off a keep-alive connection; its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


async def _connection(
    index: int, *, host: str, port: int, path: str, headers: dict[str, str],
    body: Callable[[int, int], bytes], connections: int, rate: float, t0: float,
    end: float, report: PacedReport,
) -> None:  # fmt: skip
    reader, writer = await asyncio.open_connection(host, port)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    k = 0
    try:
        while True:
            intended = t0 + (index + k * connections) / rate
            if intended >= end:
                return
            if time.perf_counter() >= end + GRACE_S:
                # Due but never sent: the server is so far behind that the run is over.
                due = math.ceil(((end - t0) * rate - index) / connections)
                report.unsent += due - k
                return
            delay = intended - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            payload = body(index, k)
            writer.write(
                f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{head}"
                f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            try:
                status = await asyncio.wait_for(_read_response(reader), TIMEOUT_S)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                report.failed += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                k += 1
                continue
            report.statuses[status] = report.statuses.get(status, 0) + 1
            done = time.perf_counter()
            report.seconds = max(report.seconds, done - t0)  # a late tail stretches the run
            if 200 <= status < 300:
                report.latencies_ms.append((done - intended) * 1000)
            else:
                report.failed += 1
            k += 1
    finally:
        writer.close()


def paced_posts(
    url: str, *, rate: float, connections: int, duration: float, headers: dict[str, str],
    body: Callable[[int, int], bytes],
) -> PacedReport:  # fmt: skip
    """POST `body(connection, k)` to `url` on the paced schedule for `duration` seconds;
    requests still unanswered at the end are waited for (and counted, late), and the rate
    served is the 2xx answers over the time until the last one came."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    report = PacedReport(offered_per_s=rate, seconds=duration)

    async def run() -> None:
        t0 = time.perf_counter() + 0.2  # every connection open before the first send
        await asyncio.gather(*(
            _connection(c, host=parts.hostname, port=parts.port, path=parts.path,
                        headers=headers, body=body, connections=connections, rate=rate,
                        t0=t0, end=t0 + duration, report=report)
            for c in range(connections)
        ))  # fmt: skip

    asyncio.run(run())
    return report
