"""`tbhub admin retention|trash` in-process: JSON output, confirmation, the error style."""

from __future__ import annotations

import json

from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from tbhub.cli.main import app
from tbhub.core.settings import Settings
from tests.housekeeping.conftest import MakeRun
from tests.times import assert_one_format

runner = CliRunner()


def tbhub(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_plan_json_counts_runs_and_bytes_per_project(
    factory: sessionmaker[Session], project: str, make_run: MakeRun, cli_env: dict[str, str]
) -> None:
    make_run(project, "a", age_days=40, size=90)
    make_run(project, "b", age_days=1)
    code, out, _ = tbhub("admin", "retention", "set", project, "--max-age-days", "30", "--json")
    assert code == 0 and json.loads(out)["max_age_days"] == 30
    code, out, _ = tbhub("admin", "retention", "plan", "--json")
    data = json.loads(out)
    assert (data["remove_runs"], data["remove_bytes"]) == (1, 100)
    [proj] = data["projects"]
    assert (proj["project"], proj["kept_runs"], proj["runs"][0]["path"]) == ("vision", 1, "a")
    assert_one_format(data, {"last_write"})


def test_apply_asks_first_and_a_no_changes_nothing(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    cli_env: dict[str, str],
) -> None:
    run = make_run(project, "a", age_days=40)
    tbhub("admin", "retention", "set", project, "--max-age-days", "30")
    code, _, err = tbhub("admin", "retention", "apply", stdin="n\n")
    assert code == 1 and "pass --yes" in err
    assert run.is_dir()


def test_apply_list_restore_purge_round_trip(
    factory: sessionmaker[Session],
    jobs_settings: Settings,
    project: str,
    make_run: MakeRun,
    cli_env: dict[str, str],
) -> None:
    run = make_run(project, "g/a", age_days=40)
    make_run(project, "g/b", age_days=50)
    tbhub("admin", "retention", "set", project, "--max-age-days", "30")
    code, out, _ = tbhub("admin", "retention", "apply", "--yes", "--json")
    assert code == 0 and json.loads(out)["trashed"] == 2
    code, out, _ = tbhub("admin", "trash", "list", "--json")
    listed = {row["run"]: row["id"] for row in json.loads(out)}
    assert set(listed) == {"vision/g/a", "vision/g/b"}
    assert_one_format(json.loads(out), {"trashed_at", "purge_after"})
    table = tbhub("admin", "trash", "list")[1]
    assert all(row["purge_after"] in table for row in json.loads(out))
    code, out, _ = tbhub("admin", "trash", "restore", "vision/g/a")
    assert code == 0 and (run / "events.out.tfevents.1700000000.host").is_file()
    code, out, _ = tbhub("admin", "trash", "purge", "--json")  # default: past the grace period
    assert json.loads(out) == {"purged": 0, "bytes": 0}
    code, out, _ = tbhub("admin", "trash", "purge", "--older-than", "0", "--json")
    assert json.loads(out) == {"purged": 1, "bytes": 110}


def test_errors_say_what_to_do_and_exit_1(
    factory: sessionmaker[Session], project: str, cli_env: dict[str, str]
) -> None:
    code, _, err = tbhub("admin", "trash", "restore", "42")
    assert code == 1 and "error: nothing in the trash matches '42'" in err
    code, out, _ = tbhub("admin", "retention", "plan", "--project", "nope", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "not_found"
    code, _, err = tbhub("admin", "retention", "set", project, "--action", "shred")
    assert code == 1 and "action 'shred' is not one of: trash, archive" in err
    code, _, err = tbhub("admin", "backup", "run")
    assert code == 1 and "set TBHUB_BACKUP_TARGET" in err
