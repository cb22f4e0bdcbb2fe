"""Memory restarts under load: failed requests, and time from crossing the limit to serving.

What it measures, with `wrk -t2 -c32` driving `GET /boards/bench/data/runs` through tbhub's
nginx (a signed-in session) the whole time:

- tbhub: N forced memory restarts. Each time one request asks the board to keep 400 MiB
  (bench/leaky_board.py: a real TensorBoard that leaks on request), so it passes its
  limit; tbhub replaces it blue/green. The script waits until nginx serves from the new
  instance (a poller with its own session reads the `X-Test-Instance` header the board
  adds) and until the old instance's processes are gone.
- anchor: N restarts the way a cron job that kills every board at once does them, but
  aimed by PID:
  SIGTERM to the board's process group (PID + start time from its state file, then
  SIGKILL after 5 s), and tbhub's supervisor starts the board again as after a crash.

Reported per side: requests wrk completed, failed requests (non-2xx/3xx answers plus
socket errors: connect, read, write, timeout), and for tbhub the seconds from the leak
(crossing the limit) to the first answer from the new instance through nginx, per restart,
with the median and the maximum. Target: 0 failed requests for tbhub; time to serve at
most two reconcile intervals plus one board start (the median of the server log's "board
bench ready in Ns" lines, printed beside it).

Settings: TBHUB_BOARD_MEMORY_LIMIT=300MiB, TBHUB_RECONCILE_INTERVAL=2 (to keep the run
short; the target scales with it), TBHUB_BOARD_MEMORY_FRESH_SECONDS=1 (a replacement may be
restarted again one second after it started). Data: 3 runs x 100 steps x 5 tags.

    .venv/bin/python bench/memory_restart.py [--restarts 20] [--json]

Needs nginx and wrk. Uses ports 19000-19499 on 127.0.0.1 only. Other work on the machine
makes the board start times (and so the time to serve) noisy; failed requests are not.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from _places import PROJECT
from _processes import temp_dir, wait_for
from _reports import arguments, at_least, log, median, report
from _sample_data import cached_logdir
from _tbhub import Tbhub
from _wrk import start_wrk, stop_wrk
from tbhub.core.processes import ProcessRef, stop_group

RUNS, STEPS, TAGS = 3, 100, 5
THREADS, CONNECTIONS = 2, 32
INTERVAL = 2.0
LEAK_MIB = 400
LIMIT = "300MiB"
LEAKY_BOARD = Path(__file__).with_name("leaky_board.py")


@dataclass
class Side:
    name: str
    requests: int = 0
    failed: int = 0
    detail: str = ""
    time_to_serve: list[float] = field(default_factory=list)


def board_start_times(tbhub: Tbhub) -> list[float]:
    """Seconds each board took to get ready, from the supervisor's log lines."""
    text = (tbhub.root / "serve.log").read_text(errors="replace")
    return [float(s) for s in re.findall(rf"board {PROJECT} ready in ([0-9.]+)s", text)]


def board_state(tbhub: Tbhub) -> dict[str, object]:
    import json

    records = sorted(tbhub.data_dir.glob("boards/*.json"))
    states = [json.loads(p.read_text()) for p in records]
    return states[-1] if len(states) == 1 else {}


def served_by(client: httpx.Client, url: str) -> str | None:
    try:
        response = client.get(url)
    except httpx.HTTPError:
        return None
    return response.headers.get("x-test-instance") if response.status_code == 200 else None


def only_instance(tbhub: Tbhub) -> str | None:
    state = board_state(tbhub)
    return str(state["instance_id"]) if state else None


def one_memory_restart(tbhub: Tbhub, leak: httpx.Client, poll: httpx.Client, side: Side) -> None:
    url = tbhub.board_url("data/environment")
    old = wait_for(lambda: only_instance(tbhub) is not None, timeout=120, what="one board")
    del old
    instance = only_instance(tbhub)
    wait_for(lambda: served_by(poll, url) == instance, timeout=60, what="the poller on it")
    response = leak.get(f"{url}?tbhub_test_leak_mib={LEAK_MIB}")
    response.raise_for_status()
    crossed = time.monotonic()
    wait_for(lambda: served_by(poll, url) not in (None, instance), timeout=120,
             what="nginx to serve from the replacement", interval=0.02)  # fmt: skip
    side.time_to_serve.append(time.monotonic() - crossed)
    wait_for(lambda: only_instance(tbhub) not in (None, instance), timeout=120,
             what="the old board to drain and stop")  # fmt: skip
    time.sleep(1.5)  # past TBHUB_BOARD_MEMORY_FRESH_SECONDS, so the next leak restarts it


def one_cron_style_restart(tbhub: Tbhub, poll: httpx.Client) -> None:
    url = tbhub.board_url("data/environment")
    wait_for(lambda: only_instance(tbhub) is not None, timeout=120, what="one board")
    state = board_state(tbhub)
    instance = str(state["instance_id"])
    wait_for(lambda: served_by(poll, url) == instance, timeout=60, what="the poller on it")
    ref = ProcessRef(pid=int(str(state["pid"])), create_time=float(str(state["create_time"])))
    stop_group(ref, grace=5.0, signals=(signal.SIGTERM, signal.SIGKILL))
    wait_for(lambda: served_by(poll, url) not in (None, instance), timeout=120,
             what="the restarted board to serve")  # fmt: skip


def run(restarts: int) -> dict[str, object]:
    storage = cached_logdir(runs=RUNS, steps=STEPS, tags=TAGS)[0].parent
    sides = [Side("tbhub"), Side("anchor")]
    with temp_dir("tbhub-bench-memory-restart.") as work:
        leaky = work / "leaky-tensorboard"
        leaky.write_text(f"#!{sys.executable}\n{LEAKY_BOARD.read_text()}")
        leaky.chmod(0o755)
        tbhub = Tbhub(root=work / "tbhub", storage_root=storage, extra_env={
            "TBHUB_TENSORBOARD_BIN": str(leaky),
            "TBHUB_BOARD_MEMORY_LIMIT": LIMIT,
            "TBHUB_BOARD_MEMORY_FRESH_SECONDS": "1",
            "TBHUB_RECONCILE_INTERVAL": str(INTERVAL),
        })  # fmt: skip
        with tbhub.serving():
            cookie, poll_cookie = tbhub.sign_in(), tbhub.sign_in()
            headers = {"Accept": "application/json"}

            def session(value: str, timeout: float) -> httpx.Client:
                cookies = {"tbhub_session": value}
                return httpx.Client(cookies=cookies, headers=headers, timeout=timeout)

            with session(cookie, 30) as leak, session(poll_cookie, 5) as poll:
                poll.get(tbhub.board_url("data/runs"))  # ask for the board
                wait_for(lambda: served_by(poll, tbhub.board_url("data/environment")) is not None,
                         timeout=120, what="the board to serve")  # fmt: skip
                for side in sides:
                    wrk = start_wrk(tbhub.board_url("data/runs"), threads=THREADS,
                                    connections=CONNECTIONS, duration=3600,
                                    log_path=work / f"wrk-{side.name}.log",
                                    headers={"Cookie": f"tbhub_session={cookie}"},
                                    options=["--timeout", "30s"])  # fmt: skip
                    try:
                        time.sleep(2)
                        for index in range(restarts):
                            if side.name == "tbhub":
                                one_memory_restart(tbhub, leak, poll, side)
                            else:
                                one_cron_style_restart(tbhub, poll)
                            log(f"  {side.name}: restart {index + 1}/{restarts} done")
                        time.sleep(2)
                    finally:
                        report = stop_wrk(wrk)
                    side.requests, side.failed = report.requests or 0, report.failed
                    side.detail = report.failures
                    log(f"{side.name}: {side.failed} failed of {side.requests} ({side.detail})")
            starts = board_start_times(tbhub)
    tbhub_side = sides[0]
    return {
        "board_start_median_s": median(starts),
        "target_s": 2 * INTERVAL + median(starts),
        "restarts": restarts,
        "connections": CONNECTIONS,
        "reconcile_interval_s": INTERVAL,
        "sides": [asdict(s) for s in sides],
        "time_to_serve_median_s": median(tbhub_side.time_to_serve),
        "time_to_serve_max_s": max(tbhub_side.time_to_serve),
    }


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--restarts", type=at_least(1), default=20)
    args = parser.parse_args()
    result = run(args.restarts)
    sides = [
        f"{side['name']:>7}: {side['failed']} failed requests of {side['requests']} "
        f"during {args.restarts} restarts ({side['detail']})"
        for side in result["sides"]  # type: ignore[attr-defined]
    ]
    report(result, as_json=args.json, text="\n".join([*sides, (
        f"time from crossing the limit to serving from the new board: median "
        f"{result['time_to_serve_median_s']:.2f}s, max {result['time_to_serve_max_s']:.2f}s; "
        f"target: two intervals ({INTERVAL:.0f}s each) + one board start (median "
        f"{result['board_start_median_s']:.2f}s) = {result['target_s']:.2f}s"
    )]))  # fmt: skip


if __name__ == "__main__":
    main()
