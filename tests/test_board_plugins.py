"""The board plugin mechanism's pure parts: the launcher's own arguments, the marked log lines
a board writes for a plugin that failed to load, the plugins a project may turn on (read
again only when their directory changed), and the TBHUB_BOARD_PLUGINS setting's check."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tbhub.core.errors import InvalidInput
from tbhub.core.settings import Settings
from tbhub.supervisor import plugin_catalog
from tbhub.supervisor.board_process import (
    MAX_PLUGIN_ERROR,
    OFF_BY_DEFAULT_PLUGINS,
    PLUGIN_ERROR_MARKER,
    board_args,
    plugin_errors,
    report_plugin_error,
    split_args,
)
from tbhub.supervisor.board_settings import SettingsChange, toggleable_plugins
from tbhub.supervisor.model import BoardSpec
from tbhub.supervisor.plugin_catalog import PluginCatalog


def test_board_args_round_trip_through_the_launcher() -> None:
    spec = BoardSpec("vision", "/data/vision", "/boards/vision", plugins=("tiny", "projector"))
    args = split_args(board_args(spec, plugin_path="/data/board-plugins"))
    assert args.disabled == {"pytorch_profiler"}
    assert args.enabled == {"tiny", "projector"}
    assert args.plugin_path == "/data/board-plugins"
    assert args.flags[:2] == ["--logdir", "/data/vision"]
    bare = split_args(board_args(BoardSpec("vision", "/d", "/boards/vision")))
    assert bare.disabled == set(OFF_BY_DEFAULT_PLUGINS) and bare.plugin_path is None


def test_a_reported_plugin_error_is_read_back_from_the_log(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report_plugin_error("tiny", RuntimeError("x" * 2000))
    report_plugin_error("other", ImportError("no module named 'foo'"))
    log = "TensorBoard 2.21.0 at http://127.0.0.1:1/\n" + capsys.readouterr().err
    log += f'{PLUGIN_ERROR_MARKER}not json\n{PLUGIN_ERROR_MARKER}{{"plugin": 1}}\n'
    errors = plugin_errors(log)
    assert [e["plugin"] for e in errors] == ["tiny", "other"]
    assert errors[0]["error"].startswith("RuntimeError: xxx")
    assert len(errors[0]["error"]) == MAX_PLUGIN_ERROR
    assert errors[1]["error"] == "ImportError: no module named 'foo'"


def install_dist(plugin_dir: Path, name: str = "tiny", version: str = "1.0") -> None:
    """A distribution with one TensorBoard plugin entry point, as pip leaves it."""
    dist = plugin_dir / f"{name}_plugins-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}-plugins\nVersion: {version}\n"
    )
    (dist / "entry_points.txt").write_text(f"[tensorboard_plugins]\n{name} = {name}:Plugin\n")


def test_a_project_may_turn_on_the_off_by_default_and_installed_extra_plugins(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path)
    assert set(toggleable_plugins(settings)) == {"projector", "pytorch_profiler"}
    install_dist(settings.board_plugin_dir)
    toggleable = toggleable_plugins(settings)
    assert set(toggleable) == {"projector", "pytorch_profiler", "tiny"}
    assert "tiny-plugins 1.0" in toggleable["tiny"]
    SettingsChange(plugins=["tiny", "pytorch_profiler"]).validate(toggleable)
    with pytest.raises(InvalidInput, match="unknown plugin\\(s\\) nonesuch; plugins a project"):
        SettingsChange(plugins=["nonesuch"]).validate(toggleable)


@pytest.mark.parametrize(
    "entry",
    ["-e git+https://example.org/x.git", "x @ https://example.org/x.whl", "--index-url=y",
     "name" * 60, "not a spec!"],
)  # fmt: skip
def test_board_plugins_must_be_requirement_specs(tmp_path: Path, entry: str) -> None:
    with pytest.raises(ValidationError, match="is not a pip requirement spec"):
        Settings(data_dir=tmp_path, board_plugins=[entry])
    assert Settings(data_dir=tmp_path, board_plugins=["a-plugin[x]>=1,<2"]).board_plugins


def test_the_extra_plugins_are_read_again_only_when_their_directory_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    read = plugin_catalog.extra_plugins
    monkeypatch.setattr(plugin_catalog, "extra_plugins", lambda p: reads.append(p) or read(p))
    catalog, plugin_dir = PluginCatalog(), tmp_path / "board-plugins"
    assert catalog.extra_plugins(str(plugin_dir)) == {} and reads == []  # no directory yet
    install_dist(plugin_dir)
    assert set(catalog.extra_plugins(str(plugin_dir))) == {"tiny"}
    assert set(catalog.extra_plugins(str(plugin_dir))) == {"tiny"} and len(reads) == 1

    install_dist(plugin_dir, "other")  # a second distribution: the directory's mtime moves
    assert set(catalog.extra_plugins(str(plugin_dir))) == {"tiny", "other"}
    entry_points = plugin_dir / "tiny_plugins-1.0.dist-info" / "entry_points.txt"
    entry_points.write_text("[tensorboard_plugins]\ntiny2 = tiny:Plugin\n")  # edited in place
    assert set(catalog.extra_plugins(str(plugin_dir))) == {"tiny2", "other"}
    assert len(reads) == 3

    staging = tmp_path / ".board-plugins-new"  # `tbhub admin plugins install` swaps it whole
    install_dist(staging, "swapped")
    plugin_dir.rename(tmp_path / "old")
    staging.rename(plugin_dir)
    assert set(catalog.extra_plugins(str(plugin_dir))) == {"swapped"}
    assert set(catalog.extra_plugins(str(plugin_dir))) == {"swapped"} and len(reads) == 4
