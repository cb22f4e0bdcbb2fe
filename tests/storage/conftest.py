"""A run directory on a real filesystem, for the upload store's tests; a storage root with
project vision and each observer mode, for the watcher's."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tbhub.domain.observers import WatchMode


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "storage" / "vision" / "run-1"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def run_fd(run_dir: Path) -> Iterator[int]:
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


@pytest.fixture(params=["inotify", "polling"])
def mode(request: pytest.FixtureRequest) -> WatchMode:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def storage(tmp_path: Path) -> Path:
    root = tmp_path / "storage"
    (root / "vision").mkdir(parents=True)
    return root
