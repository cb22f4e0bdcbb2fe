"""The board image's contents and the digest that names it (supervisor/board_image.py).

The image is built and run for real by tests/e2e/test_docker_backend.py; here its root
filesystem is written to a tar and read back, and the tag is checked to follow exactly
the inputs that change what a board runs."""

from __future__ import annotations

import io
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path

from tbhub.artifacts.rootfs import RootFs
from tbhub.supervisor.board_image import (
    IMAGE_PYTHON,
    LAUNCHER,
    LAUNCHER_MODULES,
    SITE,
    current_inputs,
    write_rootfs,
)


def launcher_copy(tmp_path: Path, *, launcher_extra: str = "", init_extra: str = "") -> Path:
    """A copy of the tbhub package directory's image inputs, optionally edited."""
    inputs = current_inputs()
    root = tmp_path / "tbhub"
    (root / "supervisor").mkdir(parents=True)
    for module in LAUNCHER_MODULES:
        (root / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(inputs.launcher_root / module, root / module)
    (root / LAUNCHER).write_text((root / LAUNCHER).read_text() + launcher_extra)
    (root / "__init__.py").write_text(
        (inputs.launcher_root / "__init__.py").read_text() + init_extra
    )
    return root


def test_the_tag_follows_the_launcher_and_the_distributions_and_nothing_else_of_tbhub(
    tmp_path: Path,
) -> None:
    inputs = current_inputs()
    same = replace(inputs, launcher_root=launcher_copy(tmp_path / "a", init_extra="# edited\n"))
    assert same.tag == inputs.tag, "the rest of tbhub is not in the image"
    edited = replace(inputs, launcher_root=launcher_copy(tmp_path / "b", launcher_extra="#\n"))
    assert edited.tag != inputs.tag
    (name, version), *rest = inputs.distributions
    upgraded = replace(inputs, distributions=((name, version + ".post1"), *rest))
    assert upgraded.tag != inputs.tag
    assert inputs.tag.startswith("tbhub-board:") and len(inputs.digest) == 16


def test_the_root_filesystem_holds_python_tensorboard_and_the_launcher_alone_of_tbhub() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        write_rootfs(current_inputs(), RootFs(tar), progress=lambda _: None)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        members = {m.name: m for m in tar.getmembers()}
    site = str(SITE).lstrip("/")
    tbhub_files = sorted(
        n for n in members if n.startswith(f"{site}/tbhub/") and members[n].isfile()
    )
    stubs = [f"{site}/tbhub/__init__.py", f"{site}/tbhub/supervisor/__init__.py"]
    assert tbhub_files == sorted([*stubs, *(f"{site}/tbhub/{m}" for m in LAUNCHER_MODULES)])
    assert members[IMAGE_PYTHON.lstrip("/")].issym()
    assert f"{site}/tensorboard/program.py" in members
    assert any(n.startswith(f"{site}/tensorboard_data_server/bin/server") for n in members)
    packages = {n.split("/")[3] for n in members if n.startswith(f"{site}/")}
    assert not packages & {"fastapi", "sqlalchemy", "docker", "uvicorn", "torch"}, (
        "only TensorBoard's requirements"
    )
    assert members["etc/passwd"].isfile() and members["tmp"].isdir()
    assert members["tmp"].mode == 0o1777
