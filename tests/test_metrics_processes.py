"""/metrics is right with several processes: two real processes count into one directory
(prometheus-client's multiprocess mode, as `tbhub serve` runs it) and a scrape answered by
either one reports the sum of both, and a live gauge only of processes still alive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.metrics_text import sample

# One process of a server: turn multiprocess mode on (the first) or inherit it (the others),
# count, then print the exposition and wait for a line on stdin before exiting.
WORKER = """
import sys
from pathlib import Path
from tbhub.core.metrics import exposition, forget_process, instruments, use_directory
first, starts, leader = sys.argv[1] == "first", int(sys.argv[2]), int(sys.argv[3])
if first:
    use_directory(Path(sys.argv[4]))
counted = instruments()
counted.board_starts.labels("new").inc(starts)
counted.leader.set(leader)
counted.request_seconds.labels("GET", "/_auth/board").observe(0.002)
print("counted", flush=True)
for line in sys.stdin:
    if line.startswith("count "):  # count without answering a scrape (which writes them)
        counted.board_starts.labels("new").inc(int(line.split()[1]))
        sys.stdout.write("\\f\\n")
        sys.stdout.flush()
        continue
    if line.startswith("forget "):
        forget_process(int(line.split()[1]))
    sys.stdout.write(exposition().decode() + "\\f\\n")
    sys.stdout.flush()
"""


def worker(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, *args], env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stdout.readline() == "counted\n"
    return process


def finish(process: subprocess.Popen[str]) -> int:
    """Let the worker exit (or kill it if it already should have); its exit status."""
    if process.stdin is not None and not process.stdin.closed:
        process.stdin.close()
    try:
        status = process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        status = process.wait(timeout=10)
    if process.stdout is not None:
        process.stdout.close()
    return status


def scrape(process: subprocess.Popen[str], command: str = "scrape") -> str:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(command + "\n")
    process.stdin.flush()
    lines = []
    while (line := process.stdout.readline()) != "\f\n":
        lines.append(line)
    return "".join(lines)


def server_and_child(directory: Path, counts: tuple[str, str], leads: tuple[str, str]) -> tuple[
    subprocess.Popen[str], subprocess.Popen[str]
]:  # fmt: skip
    """A process that turns multiprocess mode on, as `tbhub serve` does, and one it would start
    next, which inherits the directory through the environment."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    server = worker("first", counts[0], leads[0], str(directory), env=env)
    child = worker("next", counts[1], leads[1],
                   env={**env, "PROMETHEUS_MULTIPROC_DIR": str(directory)})  # fmt: skip
    return server, child


def test_two_processes_count_into_one_exposition(tmp_path: Path) -> None:
    leader, follower = server_and_child(tmp_path / "metrics", ("3", "2"), ("1", "0"))
    try:
        for process in (leader, follower):
            text = scrape(process)
            assert sample(text, "tbhub_board_starts_total", reason="new") == 5
            assert sample(text, "tbhub_supervisor_leader") == 1, "the largest of the live ones"
            hook = {"method": "GET", "route": "/_auth/board"}
            assert sample(text, "tbhub_http_request_duration_seconds_count", **hook) == 2
        assert finish(leader) == 0
        text = scrape(follower, f"forget {leader.pid}")
        assert sample(text, "tbhub_board_starts_total", reason="new") == 5, "counters stay"
        assert sample(text, "tbhub_supervisor_leader") == 0, "the leader's gauge went with it"
    finally:
        for process in (leader, follower):
            finish(process)


def test_a_stale_directory_is_emptied_when_a_server_starts(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_12345.db").write_bytes(b"left by an earlier server")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = worker("first", "1", "0", str(directory), env=env)
    try:
        assert not (directory / "counter_12345.db").exists()
        assert sample(scrape(process), "tbhub_board_starts_total", reason="new") == 1
    finally:
        finish(process)


def test_the_servers_buffered_counts_reach_other_scrapes_within_a_flush_and_at_exit(
    tmp_path: Path,
) -> None:
    """The process that turned multiprocess mode on (`tbhub serve`) adds its counts up in
    memory: another process's scrape sees them once they are written, within a second, and
    the last ones are written when it exits."""
    import time

    from tbhub.core.metrics import FLUSH_SECONDS

    server, other = server_and_child(tmp_path / "metrics", ("1", "0"), ("1", "0"))
    try:
        scrape(server, "count 4")
        deadline = time.monotonic() + 10 * FLUSH_SECONDS
        while sample(scrape(other), "tbhub_board_starts_total", reason="new") != 5:
            assert time.monotonic() < deadline, "the server's counts never reached the file"
            time.sleep(FLUSH_SECONDS / 10)
        scrape(server, "count 100")
        assert finish(server) == 0
        assert sample(scrape(other), "tbhub_board_starts_total", reason="new") == 105
    finally:
        for process in (server, other):
            finish(process)
