"""A run directory on a real filesystem, for the upload store's tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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
