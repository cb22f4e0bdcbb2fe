"""Where the proxy's cost goes: tbhub's nginx against copies of its config with one part
taken out, and against a bare nginx, all in front of the same board.

What it measures: with the board of project `bench` running and ready (as
bench/warm_throughput.py), this starts extra nginx masters on other ports, each from a copy
of the config `tbhub serve` rendered with one part taken out or replaced:

- no-access-log: `access_log off`;
- plain-access-log: a log line without the maps that redact tokens from it;
- no-added-headers: none of tbhub's `add_header` / `proxy_hide_header` on board answers
  (the CSP and the usual security headers);
- fixed-gate: no Lua gate, the board's address written into the config instead (no
  authentication at all);
- fixed-upstream: the Lua gate kept, the Lua balancer replaced by a static upstream with
  keep-alive to the board's address;
- bare: one worker, a static upstream with keep-alive, no auth, no log, no header added.

The copies are for measuring only: some let anyone in. They listen on 127.0.0.1 and are
asked with the Host of tbhub's own nginx, so the auth hook judges the same request.

Each round runs every mode once (wrk -t2 -c64, 5 s), direct, tbhub's nginx, then each
copy, each round starting one mode later than the one before (on a loaded host the mode
that follows another, or an idle board, does worse); 5 rounds by default after one
unmeasured warm-up round. Reported per mode: requests/s of each round,
the median and its ratio to direct, and the median CPU microseconds per request of the
board and of that mode's nginx (master and workers).

    .venv/bin/python bench/nginx_parts.py [--runs 5] [--duration 5] [--parts a,b,...] [--json]

Needs nginx (with the Lua module) and wrk on PATH. Uses ports 19000-19499 on 127.0.0.1
(TBHUB_BENCH_PORTS moves them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from _cpu import Parties, state_file_pids
from _places import HOST, free_port
from _processes import Group, spawn, temp_dir, wait_for
from _reports import arguments, at_least, emit_json, log, median, subset_of
from _sample_data import copied_logdir
from _tbhub import Tbhub
from _wrk import run_wrk
from warm_throughput import CONNECTIONS, PATH, RUNS, STEPS, TAGS, THREADS

BARE = """daemon off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {work}/client_body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    upstream board {{
        server {upstream};
        keepalive 128;
        keepalive_requests 100000;
    }}
    server {{
        listen {listen};
        location / {{
            proxy_pass http://board;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
        }}
    }}
}}
"""


def replaced(pattern: str, replacement: str, text: str, *, count: int = 0) -> str:
    """`text` with `pattern` replaced; a config that no longer has it is an error, not a
    variant that silently measures tbhub's config again."""
    new, found = re.subn(pattern, lambda _: replacement, text, count=count, flags=re.S)
    if not found:
        raise RuntimeError(f"the rendered nginx config has no {pattern!r}: update this bench")
    return new


def no_access_log(conf: str, upstream: str, work: Path) -> str:
    return replaced(r"access_log [^;]*;", "access_log off;", conf)


def plain_access_log(conf: str, upstream: str, work: Path) -> str:
    plain = (
        'log_format tbhub \'$remote_addr - $remote_user [$time_local] "$request" $status '
        "$body_bytes_sent request_id=$request_id upstream=$upstream_addr';"
    )
    return replaced(r"log_format tbhub .*?;", plain, conf)


def no_added_headers(conf: str, upstream: str, work: Path) -> str:
    return replaced(r"\n\s*(?:add_header|proxy_hide_header) [^\n]*", "", conf)


def fixed_gate(conf: str, upstream: str, work: Path) -> str:
    gate = r'access_by_lua_block \{ require\("tbhub_gate"\)\.judge\(\) \}'
    return replaced(gate, f'set $board_upstream "{upstream}";', conf)


def fixed_upstream(conf: str, upstream: str, work: Path) -> str:
    conf = replaced(r"proxy_pass http://\$board_pool;", "proxy_pass http://bench_board;", conf)
    pool = (
        f"upstream bench_board {{\n        server {upstream};\n        keepalive 128;\n"
        "        keepalive_requests 100000;\n    }\n    upstream tbhub_control_plane {"
    )
    return replaced(r"upstream tbhub_control_plane \{", pool, conf, count=1)


PARTS: dict[str, Callable[[str, str, Path], str]] = {
    "no-access-log": no_access_log,
    "plain-access-log": plain_access_log,
    "no-added-headers": no_added_headers,
    "fixed-gate": fixed_gate,
    "fixed-upstream": fixed_upstream,
}
BARE_NAME = "bare"


def copy_config(name: str, conf: str, upstream: str, work: Path, listen: str) -> str:
    """The config of copy `name`: tbhub's with the part changed, on its own port and files."""
    if name == BARE_NAME:
        return BARE.format(work=work, upstream=upstream, listen=listen)
    text = PARTS[name](conf, upstream, work)
    text = replaced(r"listen [0-9.]+:\d+;", f"listen {listen};", text)
    text = replaced(r"\npid [^;]*;", f"\npid {work}/nginx.pid;", text)
    # Its own cache of board answers, if the config keeps them: one directory per master.
    text = re.sub(r"proxy_cache_path \S+", f"proxy_cache_path {work}/answers", text)
    text = replaced(r"error_log [^;]*;", f"error_log {work}/error.log warn;", text)
    return re.sub(r"access_log /\S+", f"access_log {work}/access.log", text)


@dataclass
class Round:
    mode: str  # "direct", "tbhub" or a part's name
    index: int
    requests_per_s: float
    failures: str
    board_us: float  # the board's CPU microseconds per request
    nginx_us: float  # that mode's nginx


@dataclass
class Mode:
    url: str
    nginx: list[int]  # the nginx master to measure, none for direct
    host: str | None  # the Host to send, tbhub's own for a copy
    group: Group | None = None  # a copy's nginx master

    def headers(self, cookie: str) -> dict[str, str]:
        return {"Cookie": f"tbhub_session={cookie}", **({"Host": self.host} if self.host else {})}


def start_copies(
    names: Sequence[str], conf: str, upstream: str, work: Path, host: str
) -> dict[str, Mode]:
    modes = {}
    for name in names:
        directory = work / f"nginx-{name}"
        directory.mkdir()
        port = free_port()
        (directory / "nginx.conf").write_text(
            copy_config(name, conf, upstream, directory, f"{HOST}:{port}")
        )
        command = ["nginx", "-p", str(directory), "-c", str(directory / "nginx.conf")]
        group = spawn(f"nginx {name}", command, log_path=directory / "stderr.log")
        url = f"http://{HOST}:{port}/boards/bench/{PATH}"
        modes[name] = Mode(url=url, nginx=[group.pid], host=host, group=group)
    return modes


def check_answers(modes: dict[str, Mode], cookie: str) -> None:
    """Every mode answers 200 with the board's own JSON."""
    answers = {}
    for name, mode in modes.items():
        headers = mode.headers(cookie)

        def answered(url: str = mode.url, headers: dict[str, str] = headers) -> bool:
            try:
                return httpx.get(url, headers=headers, timeout=5.0).status_code == 200
            except httpx.HTTPError:
                return False

        alive = mode.group.alive if mode.group else (lambda: True)
        wait_for(answered, timeout=30.0, what=f"{name} to answer 200", alive=alive)
        answers[name] = httpx.get(mode.url, headers=headers, timeout=10.0).json()
    different = [name for name, answer in answers.items() if answer != answers["direct"]]
    if different:
        raise RuntimeError(f"not the board's answer through {different}")


def measure(
    parts: Sequence[str], repeats: int, duration: int, tbhub_bin: str
) -> tuple[list[Round], dict[str, str]]:
    rounds: list[Round] = []
    with temp_dir("tbhub-bench-nginx-parts.") as work:
        storage, _names = copied_logdir(work, runs=RUNS, steps=STEPS, tags=TAGS)
        hub = Tbhub(root=work / "tbhub", storage_root=storage, tbhub_bin=tbhub_bin)
        with hub.serving():
            cookie = hub.sign_in()
            hub.wait_for_board(cookie, PATH)
            upstream = hub.board_upstream()
            conf = (hub.data_dir / "nginx" / "nginx.conf").read_text()
            host = f"{HOST}:{hub.http_port}"
            tbhub_nginx = state_file_pids([hub.data_dir / "nginx" / "master.json"])
            modes = {
                "direct": Mode(url=hub.direct_url(PATH), nginx=[], host=None),
                "tbhub": Mode(url=hub.board_url(PATH), nginx=tbhub_nginx, host=None),
            }
            modes.update(start_copies(parts, conf, upstream, work, host))
            try:
                check_answers(modes, cookie)
                board = state_file_pids(hub.data_dir.glob("boards/*.json"))
                names = list(modes)
                for index in range(repeats + 1):  # round 0: the warm-up
                    # Each round starts one mode later: no mode always runs after the same one.
                    shift = index % len(names)
                    for name in names[shift:] + names[:shift]:
                        one = run_round(name, modes[name], index, board, cookie, duration, work)
                        if index:
                            rounds.append(one)
            finally:
                for mode in modes.values():
                    if mode.group is not None:
                        mode.group.stop(grace=10.0)
    return rounds, {name: mode.url for name, mode in modes.items()}


def run_round(
    name: str, mode: Mode, index: int, board: list[int], cookie: str, duration: int, work: Path
) -> Round:
    headers = mode.headers(cookie)
    who = Parties(trees={"board": board, "nginx": mode.nginx})
    cpu: dict[str, float] = {}
    with who.measured(cpu):
        report = run_wrk(mode.url, threads=THREADS, connections=CONNECTIONS, duration=duration,
                         log_path=work / f"wrk-{name}-{index}.log", headers=headers)  # fmt: skip
    rate, total = report.requests_per_s, report.requests
    assert rate is not None and total, report.text
    one = Round(name, index, rate, report.failures,
                board_us=round(cpu["board"] / total * 1e6, 1),
                nginx_us=round(cpu["nginx"] / total * 1e6, 1))  # fmt: skip
    log(f"round {index}: {name:16} {rate:8.1f} req/s, CPU us/request: board {one.board_us:.0f},"
        f" nginx {one.nginx_us:.0f}; {one.failures}")  # fmt: skip
    return one


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments(__doc__, runs=5, tbhub_bin=True)
    parser.add_argument("--duration", type=at_least(1), default=5, help="seconds per wrk run")
    everything = [*PARTS, BARE_NAME]
    parser.add_argument(
        "--parts", type=subset_of(everything), default=everything,
        help=f"the copies to measure, comma-separated (default: all of {','.join(everything)})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rounds, urls = measure(args.parts, args.runs, args.duration, args.tbhub_bin)
    modes = ["direct", "tbhub", *args.parts]
    direct = median([r.requests_per_s for r in rounds if r.mode == "direct"])
    summary = {}
    for mode in modes:
        mine = [r for r in rounds if r.mode == mode]
        rate = median([r.requests_per_s for r in mine])
        summary[mode] = {
            "median_rps": rate,
            "ratio": rate / direct,
            "board_us": median([r.board_us for r in mine]),
            "nginx_us": median([r.nginx_us for r in mine]),
            "failures": sorted({r.failures for r in mine}),
        }
    if args.json:
        emit_json({"benchmark": "nginx_parts", "urls": urls, "n": args.runs,
                   "wrk": f"-t{THREADS} -c{CONNECTIONS} -d{args.duration}s",
                   "samples": [asdict(r) for r in rounds], "modes": summary})  # fmt: skip
        return 0
    print(f"{'mode':16} {'median req/s':>12} {'ratio':>6} {'board us':>9} {'nginx us':>9}")
    for mode, row in summary.items():
        failures = "; ".join(row["failures"])
        print(f"{mode:16} {row['median_rps']:12.1f} {row['ratio']:6.2f}"
              f" {row['board_us']:9.0f} {row['nginx_us']:9.0f}  {failures}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
