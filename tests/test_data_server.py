"""supervisor/data_server: one entry point installs the three changes to TensorBoard's
data-server module, and each part that cannot be installed leaves the others installed.

Run on TensorBoard's real `server_ingester` module; every name a test changes is put back
when it ends (monkeypatch), so other tests of this process see TensorBoard's own."""

from __future__ import annotations

import subprocess
from types import ModuleType

import pytest
from pytest import MonkeyPatch

from tbhub.supervisor import data_server
from tbhub.supervisor.data_server.first_load import FirstLoad
from tbhub.supervisor.data_server.port_wait import PortWait


@pytest.fixture
def ingester(monkeypatch: MonkeyPatch) -> ModuleType:
    from tensorboard.data import server_ingester

    for name in ("time", "subprocess", "_make_stub", "_maybe_read_file"):
        monkeypatch.setattr(server_ingester, name, getattr(server_ingester, name))
    return server_ingester


def no_delay_installed(module: ModuleType) -> bool:
    return getattr(getattr(module, "_make_stub", None), "_tbhub_no_delay", False)


def test_install_puts_all_three_parts_in_tensorboards_module(ingester: ModuleType) -> None:
    loading = data_server.install()
    assert isinstance(loading, FirstLoad)
    assert isinstance(ingester.time, PortWait)
    assert no_delay_installed(ingester)
    assert ingester.subprocess.Popen == loading.popen
    assert data_server.install() is loading, "a second install changes nothing"


def test_a_part_whose_name_is_gone_leaves_the_other_two_installed(
    ingester: ModuleType, monkeypatch: MonkeyPatch
) -> None:
    monkeypatch.delattr(ingester, "_make_stub")
    assert isinstance(data_server.install(), FirstLoad)
    assert isinstance(ingester.time, PortWait)


def test_a_part_that_finds_another_module_leaves_it_and_the_rest_installed(
    ingester: ModuleType, monkeypatch: MonkeyPatch
) -> None:
    other_subprocess, other_time = object(), object()
    monkeypatch.setattr(ingester, "subprocess", other_subprocess)
    assert data_server.install() is None, "no watch on the first load: nothing marked loaded"
    assert ingester.subprocess is other_subprocess
    assert isinstance(ingester.time, PortWait)
    assert no_delay_installed(ingester)
    monkeypatch.setattr(ingester, "time", other_time)
    monkeypatch.setattr(ingester, "subprocess", subprocess)
    assert isinstance(data_server.install(), FirstLoad)
    assert ingester.time is other_time
