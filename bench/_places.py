"""Where the benchmarks' things are: the repository root (made importable), 127.0.0.1 and
the ports picked on it (19000-19499; TBHUB_BENCH_PORTS=low-high moves them), the executables
measured, the cache of sample data, and the bench user and project.

Everything listens on and talks to 127.0.0.1 only. The other bench modules build on this
one; it imports none of them.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import tempfile
from pathlib import Path

# Scripts run as `python bench/<name>.py`, which puts bench/ on sys.path but not the
# repository root, where tests/support (the scratch database the benchmarks share with the
# tests) lives. Appended rather than put first, so nothing at the root shadows an installed
# package.
REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))

HOST = "127.0.0.1"


def port_range(spec: str) -> range:
    """ "19000-19499" -> range(19000, 19500)."""
    low, high = (int(part) for part in spec.split("-"))
    return range(low, high + 1)


# TBHUB_BENCH_PORTS moves the benchmarks to other ports when several run on one machine.
PORT_RANGE = port_range(os.environ.get("TBHUB_BENCH_PORTS", "19000-19499"))
BIN_DIR = Path(sys.executable).parent
TBHUB_BIN = str(BIN_DIR / "tbhub")
TENSORBOARD_BIN = str(BIN_DIR / "tensorboard")
CACHE_ROOT = Path(tempfile.gettempdir()) / "tbhub-bench-cache"

PROJECT = "bench"
USER = "bench"
PASSWORD = "bench-password-not-secret"


# -- ports ------------------------------------------------------------------------------------

_handed_out: set[int] = set()


def free_port() -> int:
    """A port in PORT_RANGE nothing listens on now and this process has not handed out."""
    candidates = [p for p in PORT_RANGE if p not in _handed_out]
    random.shuffle(candidates)
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind((HOST, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1}")
