"""A real Prometheus (Debian's package) scraping a running tbhub through its nginx, with the
shipped alert rules loaded (deploy/monitoring/tbhub-alerts.yml).

Intervals are one second, and each rule's `for:` is cut to one second, so that a rule whose
condition the test causes fires within seconds. The expressions are the shipped ones.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tbhub.core.processes import ProcessRef, stop_group
from tests.e2e.harness import wait_answering, wait_until
from tests.ports import free_port

MONITORING = Path(__file__).parents[2] / "deploy" / "monitoring"
RULES = MONITORING / "tbhub-alerts.yml"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def needs_prometheus() -> None:
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is missing: deploy/install-system-deps.sh test installs it")


@dataclass
class Prometheus:
    url: str
    log_path: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        body = answer.json()
        assert body["status"] == "success", f"{expr}: {body}"
        return body["data"]["result"]  # type: ignore[no-any-return]

    def alerts(self) -> list[dict[str, Any]]:
        body = httpx.get(f"{self.url}/api/v1/alerts", timeout=5).json()
        return body["data"]["alerts"]  # type: ignore[no-any-return]

    def firing(self, name: str) -> dict[str, Any] | None:
        return next(
            (a for a in self.alerts()
             if a["labels"]["alertname"] == name and a["state"] == "firing"),
            None,
        )  # fmt: skip

    def wait_firing(self, name: str, *, timeout: float) -> dict[str, Any]:
        found = wait_until(lambda: self.firing(name), timeout=timeout, what=f"alert {name} to fire")
        return found  # type: ignore[return-value]

    def wait_scraped(self) -> None:
        def up() -> bool:
            result = self.query('up{job="tbhub"}')
            return bool(result) and result[0]["value"][1] == "1"

        wait_until(up, timeout=30, what="Prometheus to scrape tbhub")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def quick_rules(directory: Path) -> Path:
    """The shipped rules with every `for:` cut to one second."""
    path = directory / "tbhub-alerts.yml"
    path.write_text(re.sub(r"(?m)^(\s*for:) \S+$", r"\1 1s", RULES.read_text()))
    return path


@contextmanager
def running_prometheus(directory: Path, target: str) -> Iterator[Prometheus]:
    """Prometheus scraping `target` (host:port of tbhub's nginx) every second."""
    needs_prometheus()
    directory.mkdir(parents=True, exist_ok=True)
    rules = quick_rules(directory)
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        "scrape_configs:\n  - job_name: tbhub\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log_path = directory / "prometheus.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    ref = ProcessRef.of(process.pid)
    running = Prometheus(f"http://127.0.0.1:{port}", log_path)
    try:
        wait_answering(process, f"{running.url}/-/ready", what="prometheus", log=running.log)
        yield running
    finally:
        print(f"--- prometheus log ---\n{running.log()}")
        stop_group(ref, grace=5, signals=(signal.SIGTERM, signal.SIGKILL))
        process.wait(timeout=5)
