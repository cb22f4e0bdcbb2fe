"""The auth hook under load, and the board through nginx with auth versus the board directly.

What it measures, with the board of project `bench` ready and `wrk -t2 -c64 --latency`:

- hook/session: the control plane's `/_auth/board` itself (what nginx calls on a cache miss),
  with a signed-in session cookie: requests/s, p50 and p99 latency;
- hook/share: the same with a share-link cookie (`tbhub admin share create`);
- board/direct: the board's own `/boards/bench/data/environment` (the anchor);
- board/nginx: the same through nginx, its auth_request hook (answers cached a few
  seconds) and the proxy; reported as the ratio of medians to direct (target >= 0.95x).

Runs alternate (hook/session, hook/share, board/direct, board/nginx) `--runs` times after
one short warm-up of each; reported are medians. Any non-2xx answer fails the run.

With `--metrics-overhead` it measures instead what /metrics costs the hook: hook/session on
two servers side by side, one counting (the default) and one with TBHUB_METRICS_ENABLED=false,
alternating; reported is the ratio of medians, with over without (target >= 0.98x).

    .venv/bin/python bench/auth_hook.py [--runs 5] [--duration 10] [--metrics-overhead] [--json]

Needs nginx and wrk on PATH; uses loopback only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from _places import PROJECT
from _processes import temp_dir
from _reports import arguments, at_least, emit_json, log, median
from _sample_data import copied_logdir
from _tbhub import Tbhub
from _wrk import run_wrk

CONNECTIONS, THREADS = 64, 2
PATH = "data/environment"
TARGET_RATIO = 0.95
METRICS_TARGET_RATIO = 0.98


@dataclass
class Sample:
    kind: str
    index: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    non_2xx: int


def wrk(url: str, headers: dict[str, str], duration: int, work: Path, label: str) -> Sample:
    log_name = label.replace("/", "_")
    report = run_wrk(url, threads=THREADS, connections=CONNECTIONS, duration=duration,
                     log_path=work / f"wrk-{log_name}.log", headers=headers,
                     options=["--latency"])  # fmt: skip
    assert report.requests_per_s is not None
    kind, index = label.rsplit("-", 1)
    order = int(index) if index.isdigit() else 0
    return Sample(kind, order, report.requests_per_s, report.latency_ms("50"),
                  report.latency_ms("99"), report.non_2xx_3xx)  # fmt: skip


def measure(repeats: int, duration: int) -> list[Sample]:
    samples: list[Sample] = []
    with temp_dir("tbhub-bench-hook.") as work:
        storage, _ = copied_logdir(work, runs=3, steps=100, tags=5)
        hub = Tbhub(root=work / "tbhub", storage_root=storage)
        with hub.serving():
            session = hub.sign_in()
            share = json.loads(hub.cli("admin", "share", "create", PROJECT, "--json"))["url"]
            share_token = share.rsplit("/", 1)[1]
            hub.wait_for_board(session, PATH)
            hook = f"http://127.0.0.1:{hub.api_port}/_auth/board"
            original = {"X-Tbhub-Original-Uri": f"/boards/{PROJECT}/{PATH}"}
            targets = {
                "hook/session": (hook, {**original, "Cookie": f"tbhub_session={session}"}),
                "hook/share": (hook, {**original, "Cookie": f"tbhub_share={share_token}"}),
                "board/direct": (hub.direct_url(PATH), {}),
                "board/nginx": (hub.board_url(PATH), {"Cookie": f"tbhub_session={session}"}),
            }
            for kind, (url, headers) in targets.items():
                if httpx.get(url, headers=headers, timeout=10).status_code != 200:
                    raise RuntimeError(f"{kind}: {url} does not answer 200")
                wrk(url, headers, min(3, duration), work, f"{kind}-warmup")
            for index in range(1, repeats + 1):
                for kind, (url, headers) in targets.items():
                    sample = wrk(url, headers, duration, work, f"{kind}-{index}")
                    samples.append(sample)
                    log(f"run {index}/{repeats} {kind:13} {sample.requests_per_s:9.1f} req/s "
                        f"p50 {sample.p50_ms:6.2f} ms p99 {sample.p99_ms:7.2f} ms "
                        f"non-2xx {sample.non_2xx}")  # fmt: skip
    return samples


def hook_target(hub: Tbhub, work: Path) -> tuple[str, dict[str, str]]:
    """The hook's URL and a signed-in session's headers, once the hub's board is ready."""
    session = hub.sign_in()
    hub.wait_for_board(session, PATH)
    original = {"X-Tbhub-Original-Uri": f"/boards/{PROJECT}/{PATH}"}
    headers = {**original, "Cookie": f"tbhub_session={session}"}
    url = f"http://127.0.0.1:{hub.api_port}/_auth/board"
    if httpx.get(url, headers=headers, timeout=10).status_code != 200:
        raise RuntimeError(f"{url} does not answer 200")
    wrk(url, headers, 3, work, f"{hub.root.parent.name}-warmup")
    return url, headers


def measure_metrics_overhead(repeats: int, duration: int) -> list[Sample]:
    """hook/session with the metrics counting and without, on two servers, alternating."""
    samples: list[Sample] = []
    with temp_dir("tbhub-bench-hook-metrics.") as work:
        hubs = {}
        for kind, env in (("hook/metrics", {}),
                          ("hook/no-metrics", {"TBHUB_METRICS_ENABLED": "false"})):  # fmt: skip
            place = work / kind.replace("/", "-")
            storage, _ = copied_logdir(place, runs=3, steps=100, tags=5)
            hubs[kind] = Tbhub(root=place / "tbhub", storage_root=storage, extra_env=env)
        with hubs["hook/metrics"].serving(), hubs["hook/no-metrics"].serving():
            targets = {kind: hook_target(hub, work) for kind, hub in hubs.items()}
            for index in range(1, repeats + 1):
                for kind, (url, headers) in targets.items():
                    sample = wrk(url, headers, duration, work, f"{kind}-{index}")
                    samples.append(sample)
                    log(f"run {index}/{repeats} {kind:15} {sample.requests_per_s:9.1f} req/s "
                        f"p50 {sample.p50_ms:6.2f} ms p99 {sample.p99_ms:7.2f} ms")  # fmt: skip
    return samples


def report_metrics_overhead(args: argparse.Namespace) -> int:
    samples = measure_metrics_overhead(args.runs, args.duration)
    rps = {kind: median([s.requests_per_s for s in samples if s.kind == kind])
           for kind in ("hook/metrics", "hook/no-metrics")}  # fmt: skip
    ratio = rps["hook/metrics"] / rps["hook/no-metrics"]
    ok = all(s.non_2xx == 0 for s in samples)
    if args.json:
        emit_json({"benchmark": "auth_hook_metrics", "samples": [asdict(s) for s in samples],
                   "medians_rps": rps, "with_over_without": ratio, "n": args.runs,
                   "target_ratio_min": METRICS_TARGET_RATIO, "all_2xx": ok})  # fmt: skip
        return 0 if ok else 1
    for kind, value in rps.items():
        print(f"{kind:15} {value:9.1f} req/s (median of {args.runs})")
    verdict = "met" if ratio >= METRICS_TARGET_RATIO else "MISSED"
    print(f"auth hook with metrics / without: {ratio:.3f}x (target >= {METRICS_TARGET_RATIO}: "
          f"{verdict}); all answers 2xx: {ok}")  # fmt: skip
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5)
    parser.add_argument("--duration", type=at_least(1), default=10, help="seconds per wrk run")
    parser.add_argument("--metrics-overhead", action="store_true",
                        help="the hook with /metrics counting against without")  # fmt: skip
    args = parser.parse_args(argv)
    if args.metrics_overhead:
        return report_metrics_overhead(args)
    samples = measure(args.runs, args.duration)
    summary = {}
    for kind in ("hook/session", "hook/share", "board/direct", "board/nginx"):
        mine = [s for s in samples if s.kind == kind]
        summary[kind] = {
            "rps": median([s.requests_per_s for s in mine]),
            "p50_ms": median([s.p50_ms for s in mine]),
            "p99_ms": median([s.p99_ms for s in mine]),
        }
    ratio = summary["board/nginx"]["rps"] / summary["board/direct"]["rps"]
    ok = all(s.non_2xx == 0 for s in samples)
    if args.json:
        emit_json({"benchmark": "auth_hook", "wrk": f"-t{THREADS} -c{CONNECTIONS} "
                   f"-d{args.duration}s --latency", "samples": [asdict(s) for s in samples],
                   "medians": summary, "nginx_over_direct": ratio, "target_ratio_min":
                   TARGET_RATIO, "all_2xx": ok, "n": args.runs})  # fmt: skip
        return 0 if ok else 1
    for kind, row in summary.items():
        print(f"{kind:13} {row['rps']:9.1f} req/s  p50 {row['p50_ms']:6.2f} ms  "
              f"p99 {row['p99_ms']:7.2f} ms  (median of {args.runs})")  # fmt: skip
    verdict = "met" if ratio >= TARGET_RATIO else "MISSED"
    print(f"board through nginx with auth / direct: {ratio:.2f}x (target >= {TARGET_RATIO}: "
          f"{verdict}); all answers 2xx: {ok}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
