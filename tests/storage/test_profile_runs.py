"""A directory that holds only profiler traces is a run: real `torch.profiler` traces (as
`tensorboard_trace_handler` writes them, and in the `<run>/plugins/profile/<session>/` layout)
found by the scan and by the watcher with both of watchdog's observers; the traces never
reach the run-health monitor or the healer as event files."""

from __future__ import annotations

import gzip
import shutil
import threading
from pathlib import Path

import pytest

from tbhub.domain.watcher import StorageWatcher, WatchMode
from tbhub.storage.sample_logs import write_run
from tbhub.storage.scan import profile_owner, scan_project, trace_run
from tests.e2e.harness import wait_until
from tests.e2e.plugin_packages import write_profiler_trace
from tests.storage.test_watcher import POLL, WAIT, RecordingSink

SESSION = "plugins/profile/2026_12_04_15_00_00"


@pytest.mark.parametrize(
    ("rel", "name", "run"),
    [
        ("prof", "host_1.17.pt.trace.json", "prof"),
        ("prof", "host_1.17.pt.trace.json.gz", "prof"),
        ("a/b", "host_1.pt.trace.json", "a/b"),
        (f"jax/{SESSION}", "host.xplane.pb", "jax"),
        (f"torch/{SESSION}", "host_1.17.pt.trace.json", "torch"),
        (f"a/b/{SESSION}", "host.xplane.pb", "a/b"),
        ("prof", "host.xplane.pb", None),  # XProf reads xplanes only in its layout
        ("prof", "notes.json", None),
        ("plugins/profile/s", "host.xplane.pb", None),  # the project directory is no run
    ],
)
def test_the_run_a_trace_makes(rel: str, name: str, run: str | None) -> None:
    assert trace_run(rel, name) == run


def test_a_session_directory_belongs_to_the_run_above_plugins() -> None:
    assert profile_owner(f"exp/run-1/{SESSION}") == "exp/run-1"
    assert profile_owner("exp/run-1/plugins/profile") == "exp/run-1"
    assert profile_owner("exp/run-1/plugins") is None
    assert profile_owner("exp/run-1") is None


@pytest.fixture(scope="module")
def torch_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real trace of a few training steps, copied where each test wants it."""
    return write_profiler_trace(tmp_path_factory.mktemp("trace"))


def place(trace: Path, directory: Path, *, gz: bool = False) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    if gz:
        target = directory / f"{trace.name}.gz"
        with trace.open("rb") as source, gzip.open(target, "wb") as sink:
            shutil.copyfileobj(source, sink)
        return target
    return Path(shutil.copy2(trace, directory / trace.name))


def test_the_scan_finds_runs_of_traces_alone(tmp_path: Path, torch_trace: Path) -> None:
    project = tmp_path / "vision"
    direct = place(torch_trace, project / "exp" / "direct")
    place(torch_trace, project / "zipped", gz=True)
    in_session = place(torch_trace, project / "layout" / SESSION)
    (project / "xla" / SESSION).mkdir(parents=True)
    (project / "xla" / SESSION / "host.xplane.pb").write_bytes(b"\x0a\x00")
    runs = {run.path: run for run in scan_project(project, "vision")}
    assert set(runs) == {"exp/direct", "zipped", "layout", "xla"}
    assert (runs["exp/direct"].files, runs["exp/direct"].bytes) == (1, direct.stat().st_size)
    assert (runs["layout"].files, runs["layout"].bytes) == (1, in_session.stat().st_size)


def test_a_profile_beside_event_files_is_part_of_their_run(
    tmp_path: Path, torch_trace: Path
) -> None:
    project = tmp_path / "vision"
    write_run(project / "train", steps=3)
    place(torch_trace, project / "train" / SESSION)
    place(torch_trace, project / "train")
    [run] = scan_project(project, "vision")
    assert (run.path, run.files) == ("train", 3)


@pytest.mark.parametrize("mode", ["inotify", "polling"])
def test_the_watcher_finds_a_run_of_traces_and_feeds_no_trace_to_the_monitor(
    tmp_path: Path, torch_trace: Path, mode: WatchMode
) -> None:
    storage = tmp_path / "storage"
    (storage / "vision").mkdir(parents=True)
    sink = RecordingSink()
    heard: list[tuple[str, str]] = []
    lock = threading.Lock()

    def on_event_files(files: set[tuple[str, str]]) -> None:
        with lock:
            heard.extend(files)

    watcher = StorageWatcher(storage, sink, mode=mode, poll_interval=POLL, min_gap=0.1,
                             on_event_files=on_event_files)  # fmt: skip
    watcher.start()
    try:
        assert watcher.wait_ready(30)
        direct = place(torch_trace, storage / "vision" / "profiled")
        place(torch_trace, storage / "vision" / "layout" / SESSION)
        for path in ("profiled", "layout"):
            wait_until(lambda p=path: sink.run("vision", p), timeout=WAIT, what=f"{path} found")  # type: ignore[misc]
        run = sink.run("vision", "profiled")
        assert run is not None and (run.files, run.bytes) == (1, direct.stat().st_size)
        assert {path for _, path in sink.runs} == {"profiled", "layout"}
        write_run(storage / "vision" / "profiled", steps=3)  # an event file: that one is heard
        wait_until(lambda: heard, timeout=WAIT, what="the event file handed to the monitor")
        with lock:
            assert heard and all("tfevents" in path for _, path in heard), heard
    finally:
        watcher.stop()
