"""The supervisor's eyes: which board instances run, and what their probes say this pass.

Health is `/data/environment` answering 200 (unlike `/data/logdir` it needs the data
server). During a swap the loop also asks `/data/runs` of every instance of the project, so
a replacement takes over only once it lists the old one's runs, and asks instances that are
draining how many requests they are still answering.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx

from tbhub.supervisor.backends.base import Backend
from tbhub.supervisor.board_process import IN_FLIGHT_PATH
from tbhub.supervisor.plan import Instance, board_prefix

log = logging.getLogger("tbhub.supervisor")


def probe_ready(instance: Instance, client: httpx.Client, timeout: float | None = None) -> bool:
    """Ready means /data/environment answers 200: unlike /data/logdir it needs the data server.
    `timeout` (seconds) replaces the client's own for this probe."""
    if not instance.alive or instance.upstream is None:
        return False
    url = f"http://{instance.upstream}{board_prefix(instance.project)}/data/environment"
    try:
        response = client.get(url, timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def list_runs(instance: Instance, client: httpx.Client) -> frozenset[str] | None:
    url = f"http://{instance.upstream}{board_prefix(instance.project)}/data/runs"
    try:
        response = client.get(url)
        runs = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return frozenset(str(r) for r in runs) if isinstance(runs, list) else None


def requests_in_flight(instance: Instance, client: httpx.Client) -> int | None:
    """What the board says it is answering (board_process.IN_FLIGHT_PATH); None if it does
    not say (a board of an older launcher)."""
    try:
        response = client.get(f"http://{instance.upstream}{IN_FLIGHT_PATH}")
        return int(response.text) if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


class Observer:
    def __init__(self, backend: Backend, pool: ThreadPoolExecutor, probe_timeout: float) -> None:
        self.backend = backend
        self.pool = pool
        # No keep-alive: a connection left open would count as a request in flight.
        self.client = httpx.Client(
            timeout=probe_timeout, limits=httpx.Limits(max_keepalive_connections=0)
        )

    def close(self) -> None:
        self.client.close()

    def relisted(self, instances: list[Instance]) -> list[Instance]:
        """`instances` as the backend lists them now (an address learnt since), those still
        alive; outside a pass, with no probe. The backend looks at these alone: the loop asks
        every RELIST_POLL while a board starts, and the other boards have not changed."""
        wanted = {i.instance_id for i in instances}
        return [i for i in self.backend.list_instances(only=wanted) if i.alive]

    def ready(self, instance: Instance, *, timeout: float) -> bool:
        """One health probe of `instance` outside a pass, given at most `timeout` seconds."""
        return probe_ready(instance, self.client, timeout)

    def observe(self, *, full: bool, settled: Set[str] = frozenset()) -> list[Instance]:
        """Every instance the backend knows, with this pass's probes filled in.

        A full pass probes every board and reads its PSS. A fast one (while a board starts)
        skips the instances in `settled` (ready before, the only one of their project)."""
        instances = self.backend.list_instances()
        per_project = Counter(i.project for i in instances if i.alive)

        def look(instance: Instance) -> Instance:
            swapping = per_project[instance.project] > 1
            if not full and not swapping and instance.instance_id in settled:
                return replace(instance, probed=False)
            return self._probe(instance, full, swapping=swapping)

        return list(self.pool.map(look, instances))

    def _probe(self, instance: Instance, measure_memory: bool, *, swapping: bool) -> Instance:
        if not instance.alive:
            return instance
        # Asked before this pass's own probes. nginx keeps idle connections open to boards,
        # so open connections count requests only for a board that cannot tell.
        active = 0
        if swapping:
            told = requests_in_flight(instance, self.client)
            active = self.backend.active_requests(instance) if told is None else told
        ready = probe_ready(instance, self.client)
        pss = self.backend.memory_bytes(instance) if measure_memory else None
        runs = list_runs(instance, self.client) if swapping and ready else None
        return replace(instance, ready=ready, pss_bytes=pss, runs=runs, active_requests=active)
