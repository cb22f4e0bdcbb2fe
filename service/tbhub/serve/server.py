"""`tbhub serve`: the control plane (uvicorn; with its API workers, workers.py), the nginx
master and, on the leader replica, the supervisor and the jobs (replica.py, duties.py)."""

from __future__ import annotations

import gc
import logging
import secrets
import time
from pathlib import Path
from typing import IO

from sqlalchemy.engine import make_url

from tbhub.core.db import upgrade
from tbhub.core.errors import ConfigError
from tbhub.core.leader_lock import LeaderLock, key_fingerprint, replica_name
from tbhub.core.locks import LockHeld, hold_lock
from tbhub.core.log_context import configure_logging
from tbhub.core.settings import Settings, prepare_runtime
from tbhub.http.deps import AppContext
from tbhub.http.public_url import startup_warning
from tbhub.serve.api_process import run_api_server, start_metrics
from tbhub.serve.app import build_context, create_app
from tbhub.serve.cache_events import CacheListener, announcer, on_postgresql
from tbhub.serve.duties import LeaderDuties
from tbhub.serve.nginx import NginxMaster
from tbhub.serve.replica import Replica, board_location
from tbhub.serve.shared_settings import record as record_settings
from tbhub.serve.workers import ApiWorkers, bind_loopback
from tbhub.storage.scalars import load_reader
from tbhub.supervisor.backends.select import boards_place
from tbhub.supervisor.board_process import raise_open_file_limit

log = logging.getLogger("tbhub")


def hold_data_dir_lock(data_dir: Path) -> IO[str]:
    """One `tbhub serve` per data dir: its supervisor is the only one to run boards there."""
    try:
        return hold_lock(data_dir / "serve.lock")
    except LockHeld as held:
        raise ConfigError(
            f"another `tbhub serve` (pid {held.holder}) uses {data_dir}; "
            "stop it first or point TBHUB_DATA_DIR elsewhere"
        ) from None


def make_replica(settings: Settings, context: AppContext) -> Replica:
    """Leader from the start on SQLite; on PostgreSQL, whoever holds the advisory lock."""
    lock = None
    identity = ("", "")
    if make_url(settings.db_url).get_backend_name() == "postgresql":
        assert settings.secret_key is not None
        identity = (
            key_fingerprint(settings.secret_key.get_secret_value()),
            board_location(boards_place(settings)),
        )
        lock = LeaderLock(settings.db_url, replica_name(*identity, settings.http_port))
    replica = Replica(
        duties=LeaderDuties(settings, context, may_act=lambda: replica.may_act()),
        lock=lock,
        identity=identity,
        factory=context.factory,
        tracker=context.tracker,
        metrics=context.board_metrics,
        retry=settings.leader_retry_seconds,
        flush_every=settings.reconcile_interval,
    )
    context.wake_supervisor = replica.wake
    return replica


def serve(settings: Settings, *, with_nginx: bool = True, lock: IO[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM. `lock` is the data-dir lock if the caller already holds it
    (`tbhub demo` takes it before it changes anything)."""
    configure_logging(settings.log_format)
    # One line per health probe every few seconds per board says nothing an operator needs.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    prepare_runtime(settings)
    lock = lock or hold_data_dir_lock(settings.data_dir)
    start_metrics(settings)
    upgrade(settings.db_url)
    # What CLI commands on this data dir take and compare (shared_settings.py).
    log.info("settings recorded in %s", record_settings(settings, now=time.time()))
    raise_open_file_limit()

    context = build_context(settings)
    context.usage.ledger.clear()  # no upload is under way yet: none a dead process left
    # This server's name in cache notifications: its own processes skip what it announced.
    origin = secrets.token_hex(8)
    cache_listener = None
    if on_postgresql(settings.db_url):
        context.generations.announce = announcer(context.engine, origin)
        cache_listener = CacheListener(settings.db_url, context.generations, origin)
    replica = make_replica(settings, context)
    replica.join()
    listener = bind_loopback(settings.api_port)
    workers = ApiWorkers(settings, wake=replica.wake, origin=origin)
    context.tell_workers = workers.board_changed
    nginx = (
        NginxMaster(settings, api_addresses=[settings.api_address, *workers.addresses])
        if with_nginx
        else None
    )
    shutdown_hooks = tuple(
        hook
        for hook in (
            nginx.stop if nginx is not None else None,
            workers.stop,
            cache_listener.stop if cache_listener is not None else None,
        )
        if hook is not None
    )
    app = create_app(context, duties=replica, on_shutdown=shutdown_hooks)
    try:
        if cache_listener is not None:
            cache_listener.start()
        workers.start()
        if nginx is not None:
            nginx.start()
            log.info("nginx listens on http://%s", settings.http_address)
        log.info("open %s", settings.public_url)
        if (warning := startup_warning(settings)) is not None:
            log.warning("%s", warning)
        # What start-up made (modules, settings, the app) lives as long as the process: out
        # of the collector's sight, a full collection does not walk it during some request
        # (pauses of 200+ ms on a busy 2-core host: the pages' p99, bench/ui_pages.py).
        load_reader()  # the sparklines' event-file reader, so that it is frozen too
        gc.collect()
        gc.freeze()
        run_api_server(app, listener)
    finally:
        log.info("tbhub serve stopped")
        for stop in shutdown_hooks:
            stop()
        lock.close()
