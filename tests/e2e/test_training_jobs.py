"""A training job's side, end to end: `tbhub login`, `tbhub runs`, `tbhub run -- cmd`, and
the Python client's `Run`, against a real `tbhub serve` behind nginx, with a real board."""

from __future__ import annotations

import json
import re
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tbhub.core.timestamps import PATTERN
from tbhub.storage.sample_logs import scalar_value, write_run
from tests.e2e.harness import TBHUB
from tests.e2e.jobs_hub import Hub, board_scalars

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def expected_scalars(steps: int) -> list[tuple[int, float]]:
    return [(s, float(np.float32(scalar_value(0, 0, s)))) for s in range(steps)]


WRITE_EVENTS = (
    "import os, pathlib; from tbhub.storage.sample_logs import write_run; "
    "write_run(pathlib.Path(os.environ['TBHUB_LOGDIR']), steps=5, tags=1)"
)


# -- login and `tbhub runs` -----------------------------------------------------------------


def test_login_file_is_private_and_a_bad_token_saves_nothing(hub: Hub, tmp_path: Path) -> None:
    assert stat.S_IMODE(hub.config.stat().st_mode) == 0o600
    assert json.loads(hub.config.read_text())["token"] == hub.write_token
    other = tmp_path / "other.json"
    bad = hub.tbhub("login", "--url", hub.server.base_url, "--token-stdin",
                    stdin="tbh_" + "x" * 43 + "\n", TBHUB_CLIENT_CONFIG=str(other))  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.splitlines()[-1].startswith("error: ")
    assert "tbhub login" in bad.stderr and not other.exists()


def test_runs_create_list_show_finish(hub: Hub) -> None:
    made = hub.tbhub("runs", "create", "-p", "vision", "-n", "cli-run", "--hparam", "lr=0.1",
                     "--hparam", "opt=adam", "--tag", "cli", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    run = json.loads(made.stdout)
    assert run["hparams"] == {"lr": 0.1, "opt": "adam"} and Path(run["logdir"]).is_dir()
    listed = json.loads(hub.tbhub("runs", "list", "-p", "vision", "--tag", "cli", "--json").stdout)
    assert [r["id"] for r in listed] == [run["id"]]
    table = hub.tbhub("runs", "list", "-p", "vision", "--tag", "cli").stdout
    assert re.fullmatch(PATTERN, run["created_at"]) and run["created_at"] in table
    none = hub.tbhub("runs", "list", "-p", "vision", "--tag", "no-such-tag")
    assert (none.returncode, none.stdout) == (0, "no runs of vision match; try fewer filters\n")
    shown = hub.tbhub("runs", "show", str(run["id"]), "-p", "vision")
    assert run["logdir"] in shown.stdout
    done = hub.tbhub("runs", "finish", str(run["id"]), "-p", "vision", "--metric", "acc=0.93",
                     "--json")  # fmt: skip
    assert json.loads(done.stdout)["status"] == "finished"
    assert hub.run(run["id"])["metrics"] == {"acc": 0.93}


def test_runs_errors_say_what_to_do(hub: Hub) -> None:
    missing = hub.tbhub("runs", "create", "-p", "nope", "-n", "x")
    assert missing.returncode == 1 and "GET /api/v1/projects" in missing.stderr
    as_json = hub.tbhub("runs", "create", "-p", "vision", "-n", "../up", "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "invalid_input"
    no_login = hub.tbhub("runs", "list", "-p", "vision", TBHUB_CLIENT_CONFIG="/nonexistent/x")
    assert no_login.returncode == 1 and "tbhub login" in no_login.stderr


# -- `tbhub run -- cmd` ---------------------------------------------------------------------


def test_tbhub_run_registers_exports_and_marks_finished(hub: Hub) -> None:
    done = hub.tbhub("run", "-p", "vision", "-n", "wrapped", "--", sys.executable, "-c",
                     WRITE_EVENTS + "; print(os.environ['TBHUB_RUN_ID'])")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = hub.run(int(done.stdout.strip()))
    assert run["status"] == "finished" and run["name"] == "wrapped"
    assert str(run["command"]).startswith(sys.executable)
    assert board_scalars(hub, str(run["path"]), "metric/0", 5) == expected_scalars(5)


def test_tbhub_run_with_upload_sends_the_logs_and_the_board_shows_them(hub: Hub) -> None:
    done = hub.tbhub("run", "-p", "vision", "-n", "uploaded", "--upload", "--", sys.executable,
                     "-c", WRITE_EVENTS + "; print(os.environ['TBHUB_RUN_ID'], "
                     "os.environ['TBHUB_LOGDIR'])")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id, local = done.stdout.split()
    run = hub.run(int(run_id))
    assert run["status"] == "finished"
    assert not local.startswith(str(hub.server.storage))  # it wrote locally, then uploaded
    assert not Path(local).exists()  # and its scratch directory went once all was sent
    assert board_scalars(hub, str(run["path"]), "metric/0", 5) == expected_scalars(5)


TRASH_OWN_RUN = (
    "import os; from tbhub.client import Client; "
    "Client().delete_run('vision', int(os.environ['TBHUB_RUN_ID'])); "
    "print(os.environ['TBHUB_RUN_ID'], os.environ['TBHUB_LOGDIR'])"
)


def test_tbhub_run_keeps_its_scratch_directory_and_says_where_when_the_upload_fails(
    hub: Hub,
) -> None:
    done = hub.tbhub("run", "-p", "vision", "--upload", "--", sys.executable, "-c",
                     WRITE_EVENTS + "; " + TRASH_OWN_RUN)  # fmt: skip
    run_id, local = done.stdout.split()
    assert done.returncode == 1, done.stderr
    assert Path(local).is_dir() and any(Path(local).glob("events.out.tfevents.*"))
    assert f"the logs stay in {local}" in done.stderr
    assert f"tbhub upload {local} --project vision --run {run_id} --finish" in done.stderr
    assert hub.run(int(run_id))["status"] == "failed"


def test_tbhub_run_passes_the_exit_code_and_marks_failed(hub: Hub) -> None:
    done = hub.tbhub("run", "-p", "vision", "--", sys.executable, "-c",
                     "import os, sys; print(os.environ['TBHUB_RUN_ID']); sys.exit(3)")  # fmt: skip
    assert done.returncode == 3
    assert hub.run(int(done.stdout.strip()))["status"] == "failed"


def test_tbhub_run_forwards_sigterm_and_marks_killed(hub: Hub) -> None:
    script = "import os, time; print(os.environ['TBHUB_RUN_ID'], flush=True); time.sleep(60)"
    with subprocess.Popen([TBHUB, "run", "-p", "vision", "--", sys.executable, "-c", script],
                          env=hub.env(), stdout=subprocess.PIPE, text=True) as wrapper:  # fmt: skip
        try:
            assert wrapper.stdout is not None
            run_id = int(wrapper.stdout.readline())
            wrapper.send_signal(signal.SIGTERM)
            assert wrapper.wait(timeout=30) == 128 + signal.SIGTERM
        finally:
            if wrapper.poll() is None:
                wrapper.kill()
    assert hub.run(run_id)["status"] == "killed"


def test_tbhub_run_with_an_unknown_command_registers_nothing_running(hub: Hub) -> None:
    done = hub.tbhub("run", "-p", "vision", "--", "/nonexistent/train")
    assert done.returncode == 1 and "check the command" in done.stderr


# -- the Python client ----------------------------------------------------------------------

CLIENT_SCRIPT = """
import os, pathlib, signal, sys
from tbhub.client import Run
from tbhub.storage.sample_logs import write_run
mode = sys.argv[1]
with Run("vision", "client-" + mode, hparams={"lr": 0.5, "amp": True}) as run:
    print(run.id if run.active else "inactive", flush=True)
    if run.active:
        write_run(pathlib.Path(run.logdir), steps=5, tags=1)
    if mode == "fail":
        raise RuntimeError("diverged")
    if mode == "sigterm":
        os.kill(os.getpid(), signal.SIGTERM)
"""


@pytest.mark.parametrize(
    ("mode", "status", "exit_code"),
    [("ok", "finished", 0), ("fail", "failed", 1), ("sigterm", "killed", 128 + 15)],
)
def test_client_run_sets_the_status_from_how_the_job_ends(
    hub: Hub, mode: str, status: str, exit_code: int
) -> None:
    done = subprocess.run([sys.executable, "-c", CLIENT_SCRIPT, mode], env=hub.env(),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == exit_code, done.stderr
    run = hub.run(int(done.stdout.split()[0]))
    assert run["status"] == status
    assert run["hparams"] == {"lr": 0.5, "amp": True} and run["host"]
    if mode == "ok":
        assert board_scalars(hub, str(run["path"]), "metric/0", 5) == expected_scalars(5)


def test_client_run_on_a_rank_other_than_zero_registers_nothing(hub: Hub) -> None:
    before = hub.api().get("/api/v1/projects/vision/runs", params={"limit": 500}).json()["runs"]
    for variable in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
        done = subprocess.run([sys.executable, "-c", CLIENT_SCRIPT, "ok"], capture_output=True,
                              env=hub.env(**{variable: "1"}), text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0 and done.stdout.strip() == "inactive", done.stderr
    after = hub.api().get("/api/v1/projects/vision/runs", params={"limit": 500}).json()["runs"]
    assert len(after) == len(before)


def test_client_run_inside_tbhub_run_joins_that_run(hub: Hub) -> None:
    done = hub.tbhub("run", "-p", "vision", "-n", "outer", "--", sys.executable, "-c",
                     CLIENT_SCRIPT, "ok")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = hub.run(int(done.stdout.split()[0]))
    assert run["name"] == "outer" and run["status"] == "finished"


JOINING_SCRIPT = """
import sys
from tbhub.client import Run
with Run("vision", hparams={"lr": 0.5, "amp": True}, tags=["inner"], notes="from Run",
         dataset_version="v2", group=sys.argv[1] or None) as run:
    print(run.id, flush=True)
"""


def test_client_run_inside_tbhub_run_merges_what_it_was_given_into_that_run(hub: Hub) -> None:
    done = hub.tbhub("run", "-p", "vision", "-n", "outer", "--hparam", "batch=32", "--hparam",
                     "lr=0.1", "--tag", "outer", "--", sys.executable, "-c", JOINING_SCRIPT,
                     "")  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = hub.run(int(done.stdout.split()[0]))
    assert run["hparams"] == {"batch": 32, "lr": 0.5, "amp": True}
    assert (sorted(run["tags"]), run["notes"], run["dataset_version"]) == (
        ["inner", "outer"], "from Run", "v2")  # fmt: skip
    refused = hub.tbhub("run", "-p", "vision", "--", sys.executable, "-c", JOINING_SCRIPT,
                        "ablations")  # fmt: skip
    assert refused.returncode == 1
    assert "Pass `--group ablations` to tbhub run" in refused.stderr


# -- `tbhub upload` and `tbhub projects` ----------------------------------------------------


def test_tbhub_upload_sets_hparams_and_tags_and_finish_marks_the_run(
    hub: Hub, tmp_path: Path
) -> None:
    local = tmp_path / "offline-run"
    write_run(local, steps=5, tags=1)
    first = hub.tbhub("upload", str(local), "-p", "vision", "--hparam", "lr=0.1", "--tag",
                      "offline", "--finish", "--json")  # fmt: skip
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["status"] == "finished"
    run = hub.run(result["run"])
    assert (run["status"], run["hparams"], run["tags"]) == ("finished", {"lr": 0.1}, ["offline"])
    again = hub.tbhub("upload", str(local), "-p", "vision", "--hparam", "seed=1", "--tag",
                      "again", "--json")  # fmt: skip
    assert json.loads(again.stdout)["run"] == result["run"], again.stderr
    run = hub.run(result["run"])
    assert (run["hparams"], sorted(run["tags"])) == ({"lr": 0.1, "seed": 1}, ["again", "offline"])
    left = hub.tbhub("upload", str(local), "-p", "vision", "--name", "unfinished", "--run",
                     str(hub.api(hub.write_token).post("/api/v1/projects/vision/runs",
                         json={"name": "plain"}).json()["id"]), "--json")  # fmt: skip
    assert json.loads(left.stdout)["status"] == "running"  # without --finish, as before


def test_tbhub_upload_finish_marks_the_run_failed_when_the_upload_fails(
    hub: Hub, tmp_path: Path
) -> None:
    local = tmp_path / "doomed"
    write_run(local, steps=3, tags=1)
    api = hub.api(hub.write_token)
    run_id = api.post("/api/v1/projects/vision/runs", json={"name": "doomed"}).json()["id"]
    api.delete(f"/api/v1/projects/vision/runs/{run_id}")  # the upload will be refused
    done = hub.tbhub("upload", str(local), "-p", "vision", "--run", str(run_id), "--finish")
    assert done.returncode == 1 and done.stderr.splitlines()[-1].startswith("error: ")
    assert hub.run(run_id)["status"] == "failed"


def test_tbhub_projects_list_shows_what_the_token_reaches(hub: Hub) -> None:
    listed = hub.tbhub("projects", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (project,) = json.loads(listed.stdout)
    assert (project["name"], project["role"]) == ("vision", "editor")
    table = hub.tbhub("projects", "list")
    assert "vision" in table.stdout and "editor" in table.stdout
    assert f"{hub.server.base_url}/boards/vision/" in table.stdout


def test_client_imports_and_registers_with_only_httpx_installed(
    hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> None:
    venv = tmp_path_factory.mktemp("bare-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "httpx"], check=True, timeout=300,
                   capture_output=True)  # fmt: skip
    script = textwrap.dedent("""
        import sys
        from tbhub.client import Run
        with Run("vision", "bare", upload=True) as run:
            with open(run.logdir + "/notes.txt", "w") as notes:
                notes.write("uploaded with only httpx")
        heavy = {"fastapi", "sqlalchemy", "pydantic", "tensorboard", "typer", "rich"}
        print(run.id, run.status, sorted(heavy & set(sys.modules)))
    """)
    env = {**hub.env(), "PYTHONPATH": str(REPO / "service")}
    done = subprocess.run([python, "-c", script], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id, status, loaded = done.stdout.split(maxsplit=2)
    assert (status, loaded.strip()) == ("finished", "[]")
    run = hub.run(int(run_id))
    assert run["name"] == "bare"
    notes = hub.server.storage / "vision" / str(run["path"]) / "notes.txt"
    assert notes.read_text() == "uploaded with only httpx"


def test_client_and_job_commands_install_with_only_pip_from_tbhub_itself(
    hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The README's one line, on a machine with only pip and no other index: tbhub serves
    the tbhub-client wheel and every wheel it needs at /pip/."""
    venv = tmp_path_factory.mktemp("pip-only-venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in hub.env().items() if k != "PYTHONPATH"}
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "--no-index",
         "--find-links", f"{hub.server.base_url}/pip/", "tbhub-client"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    tbhub = str(venv / "bin" / "tbhub")
    listed = subprocess.run([tbhub, "projects", "list", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [p["name"] for p in json.loads(listed.stdout)] == ["vision"]
    job = textwrap.dedent("""
        import os, sys
        import tbhub
        from tbhub.client import Run
        with Run("vision") as run, open(os.path.join(run.logdir, "notes.txt"), "w") as out:
            out.write("from a pip-only machine")
        heavy = {"fastapi", "sqlalchemy", "tensorboard", "alembic"} & set(sys.modules)
        print(run.id, tbhub.__file__, sorted(heavy))
    """)
    done = subprocess.run([tbhub, "run", "-p", "vision", "--upload", "--",
                           str(venv / "bin" / "python"), "-c", job],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id, module, heavy = done.stdout.split(maxsplit=2)
    assert module.startswith(str(venv)) and heavy.strip() == "[]"
    run = hub.run(int(run_id))
    assert run["status"] == "finished"
    notes = hub.server.storage / "vision" / str(run["path"]) / "notes.txt"
    assert notes.read_text() == "from a pip-only machine"
