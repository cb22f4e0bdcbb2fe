"""Registering or finishing a run writes its hparams event file after the change committed;
a file that cannot be written leaves the answer 2xx, the values stored, and the reason on
the run (on both databases)."""

from __future__ import annotations

from pathlib import Path

from tbhub.storage.hparams_file import FILE_NAME
from tests.api.conftest import Team

RUNS = "/api/v1/projects/vision/runs"


def test_registered_hparams_and_finished_metrics_reach_the_runs_event_file(team: Team) -> None:
    h = team.headers("bob-write")
    run = team.client.post(RUNS, json={"name": "r", "hparams": {"lr": 0.1}}, headers=h).json()
    written = Path(run["logdir"]) / FILE_NAME
    first = written.read_bytes()
    assert b"lr" in first and run["hparams_file_error"] is None
    done = team.client.patch(f"{RUNS}/{run['id']}", headers=h,
                             json={"status": "finished", "metrics": {"accuracy": 0.9}})  # fmt: skip
    assert done.status_code == 200
    assert written.read_bytes().startswith(first) and b"final/accuracy" in written.read_bytes()


def test_a_file_in_the_way_is_reported_on_the_run_and_the_change_still_commits(
    team: Team,
) -> None:
    h = team.headers("bob-write")
    run = team.client.post(RUNS, json={"name": "r"}, headers=h).json()
    theirs = Path(run["logdir"]) / FILE_NAME
    theirs.write_bytes(b"the job's own bytes")
    url = f"{RUNS}/{run['id']}"
    patched = team.client.patch(url, headers=h, json={"metrics": {"accuracy": 0.9}})
    assert patched.status_code == 200, patched.text
    assert "did not write" in patched.json()["hparams_file_error"]
    assert theirs.read_bytes() == b"the job's own bytes"
    again = team.client.get(url, headers=h).json()
    assert again["metrics"] == {"accuracy": 0.9} and "did not write" in again["hparams_file_error"]

    theirs.unlink()  # out of the way: the next change writes the file and clears the reason
    patched = team.client.patch(url, headers=h, json={"metrics": {"accuracy": 0.95}})
    assert patched.json()["hparams_file_error"] is None and theirs.is_file()
