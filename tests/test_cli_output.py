"""What the CLI prints for people: values by the one formatter (tbhub/core/values.py), labels
apart from their values, whole table rows when the output is not a terminal."""

from __future__ import annotations

import os
import subprocess

import pytest

from tbhub.cli.runs import print_run
from tbhub.core.errors import InvalidInput
from tbhub.core.settings import Settings
from tbhub.core.values import format_value
from tbhub.domain.retention_policy import check_overrides
from tests.e2e.harness import TBHUB
from tests.test_cli import cli_env, tbhub  # noqa: F401 - the fixture is used by name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (2**31 - 1, "2147483647"),
        (2147483647.0, "2147483647"),
        (36525.0, "36525"),
        (0.1, "0.1"),
        (1e-8, "1e-08"),
        (0.91, "0.91"),
        (True, "true"),
        (None, "-"),
        ({"lr": 0.003, "opt": "adam", "amp": False}, "lr=0.003, opt=adam, amp=false"),
        (["a", "b"], "a, b"),
        ({}, "-"),
        ("text", "text"),
    ],
)
def test_values_read_as_a_person_writes_them(value: object, text: str) -> None:
    assert format_value(value) == text


def test_runs_show_puts_each_label_apart_from_its_value_and_no_dict_reprs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    print_run({"id": 7, "project": "vision", "path": "lr-sweep/a", "status": "finished",
               "logdir": "/srv/vision/lr-sweep/a", "hparams": {"lr": 0.1, "opt": "adam"},
               "metrics": {"acc": 0.91, "steps": 2.0e9}, "tags": ["base", "v2"],
               "retention_state": "present", "notes": ""})  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    labels = {line.split()[0]: line.split(None, 1)[1] for line in lines[1:]}
    assert labels == {
        "logdir": "/srv/vision/lr-sweep/a",
        "hparams": "lr=0.1, opt=adam",
        "metrics": "acc=0.91, steps=2000000000",
        "tags": "base, v2",
        "retention_state": "present",
    }


def test_a_bound_in_a_message_is_written_out_in_full() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_overrides({"keep_last": 2**40})
    assert "from 0 to 2147483647 " in refused.value.message, refused.value.message


def test_board_status_prints_settings_and_restarts_as_key_value_pairs(cli_env: Settings) -> None:  # noqa: F811
    assert tbhub("db", "upgrade")[0] == 0
    tbhub("admin", "project", "create", "vision")
    assert tbhub("admin", "board", "set", "vision", "--reload-interval", "30")[0] == 0
    code, out, _ = tbhub("admin", "board", "status", "vision")
    assert code == 0
    settings = next(line for line in out.splitlines() if line.startswith("settings: "))
    assert "reload_interval=30" in settings and "{" not in out and "'" not in out, out


def test_tables_are_not_wrapped_when_the_output_is_not_a_terminal(
    cli_env: Settings,  # noqa: F811
) -> None:
    assert tbhub("db", "upgrade")[0] == 0
    name = "a-project-with-a-name-long-enough-to-wrap"
    tbhub("admin", "project", "create", name)
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    # The real CLI with no terminal on any standard stream: rich would take 80 columns.
    listed = subprocess.run([TBHUB, "admin", "board", "list"], env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    [row] = [line for line in listed.stdout.splitlines() if name in line]
    assert "project" in row and "stopped" in row and len(row) > 80, listed.stdout
