"""The operator's extra TensorBoard plugins: installed beside tbhub, for boards to load.

`install_plugins` puts TBHUB_BOARD_PLUGINS (pip requirement specs) into
<data_dir>/board-plugins with this interpreter's pip (`pip install --target`): pip resolves
them against this environment, where every distribution counts as installed and keeps its
version (a constraints file of it), and only what the environment lacks goes into the
directory. The directory is swapped in
whole: a failed install leaves the previous one as it was. Boards append the directory to
sys.path (board_process.py), so it cannot replace TensorBoard or a package tbhub uses, and
they load an extra plugin only when their project turned it on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from tbhub.core.errors import ConfigError
from tbhub.supervisor.board_process import extra_plugins

PIP_TIMEOUT = 1800.0  # seconds one install may take
MAX_PIP_OUTPUT = 2000  # characters of pip's output shown when it fails


def environment_constraints() -> str:
    """`name==version` of every distribution this interpreter has, one a line."""
    pins = {d.metadata["Name"]: d.version for d in metadata.distributions() if d.metadata["Name"]}
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def install_plugins(requirements: Sequence[str], target: Path) -> dict[str, str]:
    """Install `requirements` into `target` (replacing what it held); returns the plugins
    installed, by name (see board_process.extra_plugins). [] empties the directory."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        if requirements:
            _pip_install(requirements, staging)
        found = extra_plugins(str(staging))
        if requirements and not found:
            raise ConfigError(
                f"{', '.join(requirements)} installed no TensorBoard plugin (no "
                "'tensorboard_plugins' entry point); check TBHUB_BOARD_PLUGINS names plugin "
                "packages"
            )
        _swap(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return found


def _pip_install(requirements: Sequence[str], staging: Path) -> None:
    """Resolve `requirements` against this environment (what it has counts as installed and
    stays at its version), then install what it lacks, and only that, into `staging`."""
    constraints = staging.parent / f"{staging.name}.constraints.txt"
    report = staging.parent / f"{staging.name}.report.json"
    constraints.write_text(environment_constraints())
    try:
        _pip(["install", "--dry-run", "--quiet", "--report", str(report), "-c", str(constraints),
              "--", *requirements], requirements)  # fmt: skip
        missing = [
            f"{item['metadata']['name']}=={item['metadata']['version']}"
            for item in json.loads(report.read_text())["install"]
        ]
        if missing:
            _pip(["install", "--quiet", "--no-deps", "--target", str(staging), "--", *missing],
                 requirements)  # fmt: skip
    finally:
        constraints.unlink(missing_ok=True)
        report.unlink(missing_ok=True)


def _pip(args: Sequence[str], requirements: Sequence[str]) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args],
            capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(
            f"installing the board plugins took over {PIP_TIMEOUT:.0f}s; check the package "
            "index is reachable and try again"
        ) from exc
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()[-MAX_PIP_OUTPUT:]
        raise ConfigError(
            f"pip could not install {', '.join(requirements)}; nothing changed. Fix "
            f"TBHUB_BOARD_PLUGINS (a plugin must accept the TensorBoard and packages tbhub "
            f"runs on) and run the command again. pip said:\n{output}"
        )


def _swap(staging: Path, target: Path) -> None:
    """`staging` becomes `target` in two renames; the old directory is removed after."""
    old = target.parent / f".{target.name}-old-{os.getpid()}"
    if target.exists():
        target.rename(old)
    try:
        staging.rename(target)
    except OSError:
        if old.exists():
            old.rename(target)
        raise
    shutil.rmtree(old, ignore_errors=True)
