"""The API workers' pieces that need no server: nginx's upstream lists every process, the
threads and connections are shared out among the processes, and what a worker is handed
survives the trip, and a worker's module imports nothing the first process alone runs, nor
OIDC's token checks or PostgreSQL's driver before they are used (tests/e2e/test_api_workers.py
runs real ones)."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from tbhub.core.db import make_engine, request_threads
from tbhub.core.settings import Settings
from tbhub.serve.nginx import find_nginx, render_config, write_config
from tbhub.serve.workers import WorkerSpec

ADDRESSES = ["127.0.0.1:18998", "127.0.0.1:40001", "127.0.0.1:40002"]


def make_settings(tmp_path: Path, **extra: object) -> Settings:
    return Settings(data_dir=tmp_path, secret_key="s" * 40, http_port=18999, api_port=18998,
                    **extra)  # type: ignore[arg-type]  # fmt: skip


def upstream(text: str) -> str:
    return text.split("upstream tbhub_control_plane {")[1].split("}")[0]


def test_the_upstream_lists_every_process_with_keepalive_for_each(tmp_path: Path) -> None:
    block = upstream(render_config(make_settings(tmp_path), ADDRESSES))
    assert re.findall(r"server (\S+);", block) == ADDRESSES
    assert "least_conn;" in block
    assert "keepalive 96;" in block


def test_one_process_is_the_upstream_it_always_was(tmp_path: Path) -> None:
    block = upstream(render_config(make_settings(tmp_path)))
    assert re.findall(r"server (\S+);", block) == ["127.0.0.1:18998"]
    assert "least_conn" not in block and "keepalive 32;" in block


def test_the_config_with_workers_passes_nginx_t(tmp_path: Path) -> None:
    conf = write_config(make_settings(tmp_path), ADDRESSES)
    command = [find_nginx("nginx"), "-t", "-p", str(tmp_path / "nginx"), "-c", str(conf),
               "-e", str(tmp_path / "e.log")]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("workers", "threads"), [(1, 40), (2, 20), (3, 14), (4, 10), (16, 10)])
def test_the_request_threads_are_shared_out_among_the_workers(workers: int, threads: int) -> None:
    assert request_threads(workers) == threads


def test_a_process_keeps_one_connection_per_thread_and_one_more_at_peak(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'db.sqlite3'}", threads=request_threads(2))
    try:
        assert engine.pool.size() == 20  # type: ignore[attr-defined]
        assert engine.pool._max_overflow == 20  # type: ignore[attr-defined]
    finally:
        engine.dispose()


@pytest.mark.parametrize("workers", [0, 17])
def test_the_worker_count_is_bounded(tmp_path: Path, workers: int) -> None:
    with pytest.raises(ValidationError, match="api_workers"):
        make_settings(tmp_path, api_workers=workers)


def test_a_worker_gets_the_settings_with_their_secret(tmp_path: Path) -> None:
    spec = WorkerSpec(settings=make_settings(tmp_path, api_workers=2), parent=1, listen_fd=3,
                      wake_fd=4, changes_fd=5, origin="abc")  # fmt: skip
    back = pickle.loads(pickle.dumps(spec))
    assert back == spec
    assert back.settings.secret_key is not None
    assert back.settings.secret_key.get_secret_value() == "s" * 40


def uploads_location(text: str) -> str:
    return text.split(
        'location ~ "^/api/v1/projects/[a-z0-9][a-z0-9-]{0,62}/runs/[0-9]+/files/" {'
    )[1].split("}")[0]


def test_uploads_go_to_the_workers_and_to_the_first_process_only_as_a_backup(
    tmp_path: Path,
) -> None:
    """The first process runs the watcher and run health, which read what is uploaded."""
    text = render_config(make_settings(tmp_path), ADDRESSES)
    assert "proxy_pass http://tbhub_uploads;" in uploads_location(text)
    block = text.split("upstream tbhub_uploads {")[1].split("}")[0]
    assert re.findall(r"server (\S+);", block) == ADDRESSES[1:]
    assert re.findall(r"server (\S+) backup;", block) == ADDRESSES[:1]
    assert "least_conn;" in block and "keepalive 96;" in block


def test_with_one_process_uploads_go_to_it(tmp_path: Path) -> None:
    text = render_config(make_settings(tmp_path))
    assert "proxy_pass http://tbhub_control_plane;" in uploads_location(text)
    assert "tbhub_uploads" not in text


@pytest.mark.parametrize(("cores", "workers"), [(1, 1), (2, 2), (3, 3), (4, 4), (64, 4)])
def test_the_default_is_one_process_a_core_and_at_most_four(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, workers: int
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert make_settings(tmp_path).api_workers == workers
    assert make_settings(tmp_path, api_workers=1).api_workers == 1


def test_password_sign_ins_go_to_the_first_process_and_to_a_worker_only_as_a_backup(
    tmp_path: Path,
) -> None:
    """Failed sign-ins are counted per process: all of them in one keeps the lockout."""
    text = render_config(make_settings(tmp_path), ADDRESSES)
    location = text.split("location = /auth/login {")[1].split("}")[0]
    assert "proxy_pass http://tbhub_sign_in;" in location
    block = text.split("upstream tbhub_sign_in {")[1].split("}")[0]
    assert re.findall(r"server (\S+);", block) == ADDRESSES[:1]
    assert re.findall(r"server (\S+) backup;", block) == ADDRESSES[1:]
    one = render_config(make_settings(tmp_path))
    assert "proxy_pass http://tbhub_control_plane;" in one.split("location = /auth/login {")[1]
    assert "tbhub_sign_in" not in one


def test_a_worker_imports_neither_the_first_processs_parts_nor_what_waits_for_use() -> None:
    # What `python -m tbhub.serve.api_worker` has imported before it reads its spec.
    script = "import json, sys, tbhub.serve.api_worker; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True, env=os.environ)  # fmt: skip
    imported = set(json.loads(result.stdout))
    first_process_only = {
        "tbhub.serve.server", "tbhub.serve.duties", "tbhub.serve.nginx",
        "tbhub.supervisor.loop", "tbhub.domain.watcher", "tbhub.health.monitor",
        "docker", "watchdog", "alembic", "numpy", "tensorboard.util.tensor_util",
    }  # fmt: skip
    until_used = {"joserfc", "cryptography", "psycopg"}  # an OIDC sign-in; PostgreSQL
    assert sorted((first_process_only | until_used) & imported) == []
    assert "tbhub.serve.app" in imported
