"""wrk runs, started in their own process group, and what their output says."""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from _processes import Group, spawn
from tbhub.core.processes import stop_group

WRK_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass
class WrkReport:
    """What wrk printed: its summary, read from `text`."""

    text: str

    def _find(self, pattern: str) -> re.Match[str] | None:
        return re.search(pattern, self.text, re.MULTILINE)

    @property
    def requests_per_s(self) -> float | None:
        found = self._find(r"^Requests/sec:\s+([\d.]+)")
        return float(found.group(1)) if found else None

    @property
    def requests(self) -> int | None:
        found = self._find(r"^\s*(\d+) requests in")
        return int(found.group(1)) if found else None

    @property
    def non_2xx_3xx(self) -> int:
        found = self._find(r"Non-2xx or 3xx responses:\s+(\d+)")
        return int(found.group(1)) if found else 0

    @property
    def socket_errors(self) -> str | None:
        """wrk's count of each kind ("connect 0, read 2, write 0, timeout 1"), or None."""
        found = self._find(r"Socket errors:\s+(.+)")
        return found.group(1).strip() if found else None

    @property
    def failed(self) -> int:
        """Non-2xx/3xx answers plus socket errors of every kind."""
        errors = self.socket_errors
        return self.non_2xx_3xx + sum(int(n) for n in re.findall(r"\d+", errors or ""))

    @property
    def failures(self) -> str:
        """wrk's own lines for what failed, or "no errors reported"."""
        parts = []
        if self._find(r"Non-2xx or 3xx responses:"):
            parts.append(f"Non-2xx or 3xx responses: {self.non_2xx_3xx}")
        if self.socket_errors is not None:
            parts.append(f"Socket errors: {self.socket_errors}")
        return " ".join(parts) or "no errors reported"

    def latency_ms(self, percent: str) -> float:
        """A percentile of the latency distribution (`wrk --latency`), in ms."""
        found = self._find(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s)")
        if found is None:
            raise RuntimeError(f"no {percent}% latency in wrk's output:\n{self.text}")
        return float(found.group(1)) * WRK_UNITS[found.group(2)]


def start_wrk(
    url: str, *, threads: int, connections: int, duration: int, log_path: Path,
    headers: dict[str, str] | None = None, options: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> Group:  # fmt: skip
    """`wrk -t<threads> -c<connections> -d<duration>s [options] [-H header]... <url>
    [-- script_args...]`."""
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", *options]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    command.append(url)
    if script_args:
        command += ["--", *script_args]
    return spawn("wrk", command, log_path=log_path)


def stop_wrk(wrk: Group) -> WrkReport:
    """Stop a wrk that runs on; it prints its summary when it gets SIGINT."""
    stop_group(wrk.ref, grace=10.0, signals=(signal.SIGINT, signal.SIGKILL))
    return WrkReport(wrk.log_path.read_text(errors="replace"))


def run_wrk(
    url: str, *, threads: int, connections: int, duration: int, log_path: Path,
    headers: dict[str, str] | None = None, options: Sequence[str] = (),
    script_args: Sequence[str] = (),
) -> WrkReport:  # fmt: skip
    """One wrk run to its end; a failed run (exit code, no request count or rate) raises."""
    wrk = start_wrk(url, threads=threads, connections=connections, duration=duration,
                    log_path=log_path, headers=headers, options=options,
                    script_args=script_args)  # fmt: skip
    try:
        code = wrk.process.wait(timeout=duration + 60)
    finally:
        wrk.stop()
    report = WrkReport(wrk.log_path.read_text(errors="replace"))
    if code != 0 or report.requests_per_s is None or report.requests is None:
        raise RuntimeError(f"wrk failed (exit {code}):\n{report.text}")
    return report
