"""Stand-in programs for the tensorboard binary, written as executable Python scripts."""

from __future__ import annotations

import sys
from pathlib import Path


def write_script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(0o755)
    return path
