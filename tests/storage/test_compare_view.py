"""The compare view on a real filesystem: hard links to the event files of the runs picked,
named by project, kept up to date as runs grow, change and go, and never through a
symlink."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tbhub.core.errors import ConfigError, UnsafePath
from tbhub.storage.compare_view import ViewRun, remove_views, sync_view

SLUG = "cmp-0123456789ab"
EVENTS = "events.out.tfevents.1700000000.host"


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    for project in ("vision", "speech"):
        run = root / project / "run-01"
        (run / "train").mkdir(parents=True)
        (run / EVENTS).write_bytes(b"first")
        (run / "train" / EVENTS).write_bytes(b"train")
        (run / "checkpoint.pt").write_bytes(b"weights")
    return root


RUNS = [ViewRun("vision", "run-01"), ViewRun("speech", "run-01")]


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


def test_each_event_file_is_hard_linked_under_its_project_and_nothing_else(
    storage: Path,
) -> None:
    view = storage / ".tbhub-compare"
    assert sync_view(storage, view, SLUG, RUNS) == 4
    assert files(view / SLUG) == {
        f"vision/run-01/{EVENTS}", f"vision/run-01/train/{EVENTS}",
        f"speech/run-01/{EVENTS}", f"speech/run-01/train/{EVENTS}",
    }  # fmt: skip
    source, linked = storage / "vision/run-01" / EVENTS, view / SLUG / "vision/run-01" / EVENTS
    assert os.path.samefile(source, linked) and not linked.is_symlink()
    with source.open("ab") as writer:  # a job appends: the board reads it through the link
        writer.write(b"+more")
    assert linked.read_bytes() == b"first+more"


def test_a_sync_follows_new_replaced_and_removed_files(storage: Path) -> None:
    view = storage / ".tbhub-compare"
    sync_view(storage, view, SLUG, RUNS)
    run = storage / "vision/run-01"
    (run / "eval").mkdir()
    (run / "eval" / EVENTS).write_bytes(b"eval")  # a new sub-run
    replaced = run / EVENTS
    replaced.unlink()
    replaced.write_bytes(b"rewritten")  # another inode under the same name
    (storage / "speech/run-01").rename(storage / "speech-trashed")  # retention took it
    assert sync_view(storage, view, SLUG, RUNS) == 3
    assert files(view / SLUG) == {
        f"vision/run-01/{EVENTS}", f"vision/run-01/train/{EVENTS}", f"vision/run-01/eval/{EVENTS}",
    }  # fmt: skip
    assert (view / SLUG / "vision/run-01" / EVENTS).read_bytes() == b"rewritten"
    assert not (view / SLUG / "speech").exists(), "nothing keeps a removed run's bytes"


def test_no_symlink_is_ever_followed(storage: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / EVENTS).write_bytes(b"secret")
    run = storage / "vision/run-01"
    (run / "linked-dir").symlink_to(secret)
    (run / f"{EVENTS}.2").symlink_to(secret / EVENTS)
    view = storage / ".tbhub-compare"
    sync_view(storage, view, SLUG, RUNS)
    assert not any("linked-dir" in f or f.endswith(".2") for f in files(view / SLUG))

    (storage / "speech/run-02").symlink_to(secret)  # a run directory that leads outside
    with pytest.raises(UnsafePath, match="symlink"):
        sync_view(storage, view, SLUG, [*RUNS, ViewRun("speech", "run-02")])


def test_a_compare_root_on_another_filesystem_is_refused_with_the_fix(storage: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(storage).st_dev:
        pytest.skip("needs /dev/shm on a filesystem of its own")
    with (
        tempfile.TemporaryDirectory(dir=shm) as other,
        pytest.raises(ConfigError, match="TBHUB_COMPARE_ROOT"),
    ):
        sync_view(storage, Path(other), SLUG, RUNS)


def test_views_of_boards_no_longer_kept_are_removed_and_nothing_else(storage: Path) -> None:
    view = storage / ".tbhub-compare"
    other = "cmp-ba9876543210"
    sync_view(storage, view, SLUG, RUNS)
    sync_view(storage, view, other, RUNS[:1])
    (view / "not-a-view").mkdir()
    assert remove_views(view, keep={SLUG}) == [other]
    assert sorted(p.name for p in view.iterdir()) == [SLUG, "not-a-view"]
    assert (storage / "vision/run-01" / EVENTS).read_bytes() == b"first", "sources untouched"
