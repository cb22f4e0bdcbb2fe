"""Hyperparameters and final metrics registered with tbhub reach TensorBoard's HPARAMS tab:
a real `tbhub serve`, its real board, and the hparams plugin's own routes behind nginx."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tbhub.storage.hparams_file import FILE_NAME
from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until

PLUGIN = "/boards/vision/data/plugin/hparams"
STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]


def experiment(client: httpx.Client) -> dict[str, Any]:
    response = client.post(f"{PLUGIN}/experiment", json={"experimentName": ""})
    return response.json() if response.status_code == 200 else {}  # type: ignore[no-any-return]


def session_groups(client: httpx.Client) -> dict[str, dict[str, Any]]:
    """group name -> {hparams, metrics} as the HPARAMS tab's table shows them."""
    body = {"experimentName": "", "allowedStatuses": STATUSES, "colParams": [],
            "startIndex": 0, "sliceSize": 100}  # fmt: skip
    response = client.post(f"{PLUGIN}/session_groups", json=body)
    assert response.status_code == 200, response.text
    groups = {}
    for group in response.json().get("sessionGroups", []):
        metrics = {m["name"]["tag"]: m["value"] for m in group.get("metricValues", [])}
        groups[group["name"]] = {"hparams": group["hparams"], "metrics": metrics}
    return groups


def test_registered_hparams_and_final_metrics_show_in_the_hparams_tab(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    server.add_user("alice", "alice-password")
    server.add_project("vision", owner="alice")
    server.start()
    server.cli("admin", "board", "set", "vision", "--reload-interval", "1")
    job = server.token_client(server.add_token("alice", ["vision"]))
    created = job.post("/api/v1/projects/vision/runs", json={
        "name": "resnet", "hparams": {"lr": 0.1, "optimizer": "adam", "amp": True}})  # fmt: skip
    assert created.status_code == 201, created.text
    run = created.json()
    assert run["hparams_file_error"] is None
    logdir = Path(run["logdir"])
    write_run(logdir, steps=5, tags=1)  # what the job logs itself
    assert (logdir / FILE_NAME).is_file()

    alice = server.sign_in("alice", "alice-password")
    alice.get("/boards/vision/")
    wait_until(lambda: experiment(alice).get("hparamInfos"), timeout=60,
               what="the board's HPARAMS experiment")  # fmt: skip
    infos = {h["name"]: h for h in experiment(alice)["hparamInfos"]}
    assert set(infos) == {"lr", "optimizer", "amp"}

    # Finished while the board reads the run: the metric is appended, the board shows it.
    for accuracy in (0.91, 0.93):
        body = {"status": "finished", "metrics": {"accuracy": accuracy}}
        finished = job.patch(f"/api/v1/projects/vision/runs/{run['id']}", json=body)
        assert finished.status_code == 200, finished.text

    def groups_with_metric() -> dict[str, dict[str, Any]]:
        groups = session_groups(alice)
        return groups if any(abs(g["metrics"].get("final/accuracy", 0) - 0.93) < 1e-6
                             for g in groups.values()) else {}  # fmt: skip

    groups = wait_until(groups_with_metric, timeout=60, what="the run's final metric")
    assert isinstance(groups, dict)
    [group] = groups.values()
    assert group["hparams"] == {"lr": 0.1, "optimizer": "adam", "amp": True}
    metric_tags = {m["name"]["tag"] for m in experiment(alice)["metricInfos"]}
    assert "final/accuracy" in metric_tags
