"""Stand-in programs for the tensorboard binary, written as executable Python scripts."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from tbhub.domain.boards import AccessTracker
from tbhub.supervisor.backends.local import LocalBackend
from tbhub.supervisor.loop import Supervisor
from tbhub.supervisor.plan import Policy

IDLE_FOREVER = "import time\ntime.sleep(600)\n"


def write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path


@contextmanager
def idle_supervisor(
    factory: sessionmaker[Session], storage: Path, tmp_path: Path
) -> Iterator[tuple[Supervisor, LocalBackend]]:
    """A supervisor whose boards are idle stand-ins; every board is stopped afterwards."""
    backend = LocalBackend(
        state_dir=tmp_path / "boards", owner=str(tmp_path),
        tensorboard_bin=str(write_script(tmp_path / "tb", IDLE_FOREVER)), stop_grace=0.2,
    )  # fmt: skip
    supervisor = Supervisor(
        factory=factory, backend=backend, tracker=AccessTracker(),
        storage_root=str(storage), idle_timeout=600, interval=60,
        policy=Policy(start_timeout=60),
    )  # fmt: skip
    try:
        yield supervisor, backend
    finally:
        for instance in backend.list_instances():
            backend.stop(instance)
        supervisor.shutdown(stop_boards=True)
