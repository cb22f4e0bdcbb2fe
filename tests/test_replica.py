"""Leader election among replicas on a real PostgreSQL (serve/replica.py,
core/leader_lock.py), with a recording stand-in for the leader's duties;
tests/e2e/test_replicas.py runs real servers."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import select, text

from tbhub.core.db import make_engine, make_session_factory, transaction
from tbhub.core.errors import ConfigError, JobBusy
from tbhub.core.leader_lock import LeaderLock, list_replicas, replica_name
from tbhub.core.models import Board
from tbhub.core.settings import Settings
from tbhub.domain.boards import AccessTracker, BoardRef
from tbhub.domain.projects import create_project
from tbhub.housekeeping.config import job_lock
from tbhub.serve.replica import Replica
from tbhub.supervisor.metrics import SupervisorMetrics
from tests.conftest import MigratedTemplates, postgres_database
from tests.e2e.harness import TBHUB, wait_until

KEY, LOCATION = "0123abcd", "4567ef01"


class RecordingDuties:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.wakes = 0

    def start(self) -> None:
        self.events.append("start")

    def wake(self) -> None:
        self.wakes += 1

    def stop(self, *, stop_boards: bool) -> None:
        self.events.append("stop boards" if stop_boards else "stop, boards left running")

    def stop_boards(self) -> None:
        self.events.append("stop boards")


@pytest.fixture
def database_url(migrated_templates: MigratedTemplates, tmp_path: Path) -> Iterator[str]:
    with migrated_templates.copy("postgresql", tmp_path) as url:
        yield url


class Replicas:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.factory = make_session_factory(self.engine)
        self.started: list[Replica] = []

    def make(self, port: int, *, identity: tuple[str, str] = (KEY, LOCATION)) -> Replica:
        replica = Replica(
            duties=RecordingDuties(),
            lock=LeaderLock(self.url, replica_name(*identity, port)),
            identity=identity,
            factory=self.factory,
            tracker=AccessTracker(),
            metrics=SupervisorMetrics(),
            retry=0.1,
            flush_every=0.1,
        )
        self.started.append(replica)
        return replica

    def close(self) -> None:
        for replica in self.started:
            replica.shutdown()
        self.engine.dispose()


@pytest.fixture
def replicas(database_url: str) -> Iterator[Replicas]:
    made = Replicas(database_url)
    try:
        yield made
    finally:
        made.close()


def last_access(replicas: Replicas, project_id: int) -> datetime | None:
    with replicas.factory() as session:
        at = session.scalar(select(Board.last_access_at).where(Board.project_id == project_id))
    return None if at is None else at.astimezone(UTC)


def duties(replica: Replica) -> RecordingDuties:
    assert isinstance(replica.duties, RecordingDuties)
    return replica.duties


def test_the_first_replica_leads_and_a_second_stands_by_until_it_lets_go(
    replicas: Replicas,
) -> None:
    first, second = replicas.make(1), replicas.make(2)
    first.start()
    second.start()
    assert first.leading and first.may_act()
    assert not second.leading and not second.may_act()
    assert duties(second).events == []
    with replicas.factory() as session:
        listed = list_replicas(session)
    assert [(r.name, r.leader) for r in listed] == [
        (replica_name(KEY, LOCATION, 1), True),
        (replica_name(KEY, LOCATION, 2), False),
    ]

    first.shutdown()  # another replica is there to adopt the boards: they keep running
    assert duties(first).events == ["start", "stop, boards left running"]
    wait_until(lambda: second.leading, timeout=5, what="the standby to lead")
    second.shutdown()  # the last one stops its boards
    assert duties(second).events == ["start", "stop boards"]


def test_the_last_replica_out_stops_the_boards_even_before_it_took_the_lock(
    replicas: Replicas,
) -> None:
    """A leader leaving hands its boards to the standby; a standby that leaves at once after,
    before its lock thread took the lock, is the last one out and must stop them (they were
    left running, with nobody to adopt them)."""
    first, second = replicas.make(1), replicas.make(2)
    first.start()
    second.join()  # connected, so the leader hands over to it; its lock thread not yet run
    first.shutdown()
    assert duties(first).events == ["start", "stop, boards left running"]
    assert not second.leading
    second.shutdown()
    assert duties(second).events == ["stop boards"]


def test_a_standby_leaving_while_the_leader_stays_stops_nothing(replicas: Replicas) -> None:
    first, second = replicas.make(1), replicas.make(2)
    first.start()
    second.start()
    second.shutdown()
    assert duties(second).events == []
    assert first.leading and duties(first).events == ["start"]


def test_a_leader_whose_lock_connection_is_cut_stops_and_a_standby_takes_over(
    replicas: Replicas,
) -> None:
    first, second = replicas.make(1), replicas.make(2)
    first.start()
    second.start()
    with replicas.engine.connect() as connection:
        connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = :name"
            ),
            {"name": replica_name(KEY, LOCATION, 1)},
        )
    wait_until(lambda: not first.leading, timeout=5, what="the cut-off leader to step down")
    assert not first.may_act()
    assert duties(first).events == ["start", "stop, boards left running"]
    wait_until(lambda: second.leading, timeout=5, what="the standby to lead")
    # The old leader reconnects, as a standby now.
    wait_until(lambda: first.lock is not None and first.lock.connected, timeout=5,
               what="the old leader to reconnect")  # fmt: skip
    assert not first.leading


def test_a_standby_passes_a_wake_up_to_the_leader(replicas: Replicas) -> None:
    leader, standby = replicas.make(1), replicas.make(2)
    leader.start()
    standby.start()
    standby.wake()
    wait_until(lambda: duties(leader).wakes == 1, timeout=5, what="the leader to be woken")
    assert duties(standby).wakes == 0


def test_a_standby_records_the_board_accesses_its_hook_saw(
    replicas: Replicas, tmp_path: Path
) -> None:
    leader, standby = replicas.make(1), replicas.make(2)
    leader.start()
    standby.start()
    with transaction(replicas.factory) as session:
        project = create_project(session, name="vision", storage_root=tmp_path, owner=None,
                                 actor="test")  # fmt: skip
        project_id = project.id
    seen = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    standby.tracker.restore({BoardRef.of_project(project_id): seen})

    wait_until(lambda: last_access(replicas, project_id) == seen, timeout=5,
               what="the standby to write the access")  # fmt: skip


class FailingOnceTracker(AccessTracker[BoardRef]):
    def __init__(self) -> None:
        super().__init__()
        self.failures = 0

    def drain(self) -> dict[BoardRef, datetime]:
        if self.failures == 0:
            self.failures += 1
            raise RuntimeError("a bug in one pass")
        return super().drain()


def test_the_lock_thread_outlives_a_pass_that_fails(replicas: Replicas, tmp_path: Path) -> None:
    leader, standby = replicas.make(1), replicas.make(2)
    standby.tracker = tracker = FailingOnceTracker()
    leader.start()
    standby.start()
    wait_until(lambda: tracker.failures == 1, timeout=5, what="the failing pass")
    with transaction(replicas.factory) as session:
        project = create_project(session, name="vision", storage_root=tmp_path, owner=None,
                                 actor="test")  # fmt: skip
        project_id = project.id
    seen = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    tracker.restore({BoardRef.of_project(project_id): seen})

    wait_until(lambda: last_access(replicas, project_id) == seen, timeout=5,
               what="the next pass to write the access")  # fmt: skip


@pytest.mark.parametrize(
    ("other", "refusal"),
    [((KEY[::-1], LOCATION), "another secret key"), ((KEY, LOCATION[::-1]), "elsewhere")],
)
def test_a_replica_that_disagrees_with_the_others_is_refused(
    replicas: Replicas, other: tuple[str, str], refusal: str
) -> None:
    replicas.make(1).start()
    with pytest.raises(ConfigError, match=refusal):
        replicas.make(2, identity=other).start()


def test_a_server_on_sqlite_leads_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tbhub.sqlite3'}"
    engine = make_engine(url)
    recording = RecordingDuties()
    replica = Replica(
        duties=recording,
        lock=None,
        factory=make_session_factory(engine),
        tracker=AccessTracker(),
        metrics=SupervisorMetrics(),
    )
    replica.start()
    assert replica.leading and replica.may_act()
    replica.wake()
    replica.shutdown()
    engine.dispose()
    assert recording.events == ["start", "stop boards"] and recording.wakes == 1


def test_replicas_upgrading_the_schema_together_all_succeed(tmp_path: Path) -> None:
    with postgres_database() as url:
        env = {**os.environ, "TBHUB_DATABASE_URL": url,
               "TBHUB_CONFIG": str(tmp_path / "absent.toml")}  # fmt: skip
        upgrades = [
            subprocess.Popen(
                [TBHUB, "db", "upgrade"],
                env={**env, "TBHUB_DATA_DIR": str(tmp_path / f"d{i}")},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for i in range(3)
        ]  # fmt: skip
        outputs = [process.communicate(timeout=120)[0] for process in upgrades]
        assert [process.returncode for process in upgrades] == [0, 0, 0], outputs


def test_a_job_runs_once_on_the_database_whatever_data_dir_asks(
    database_url: str, tmp_path: Path
) -> None:
    def settings(data_dir: str) -> Settings:
        return Settings(data_dir=tmp_path / data_dir, database_url=database_url)

    busy = pytest.raises(JobBusy, match="another backup job is running on this database")
    with job_lock(settings("replica-a"), "backup"):
        with busy, job_lock(settings("replica-b"), "backup"):
            pass
        with job_lock(settings("replica-b"), "retention"):  # another kind may run meanwhile
            pass
    with job_lock(settings("replica-b"), "backup"):  # and the lock is free again
        pass


def test_a_job_that_ended_frees_its_lock_before_the_next_asks(
    database_url: str, tmp_path: Path
) -> None:
    """The server lets go of a closed connection's locks only as its process exits, so a job
    run right after another found the lock taken unless the first unlocked it itself."""
    settings = Settings(data_dir=tmp_path / "data", database_url=database_url)
    for _ in range(50):
        with job_lock(settings, "backup"):
            pass


def test_a_standby_holds_no_board_row_while_it_waits_for_another(
    replicas: Replicas, tmp_path: Path
) -> None:
    """The soak found a deadlock: a standby wrote its accesses in one transaction (holding
    one board row while waiting for the next) as the leader's reconcile pass updated many
    board rows. Written one row a transaction, the first row is free while the standby
    waits for the second."""
    with transaction(replicas.factory) as session:
        ids = [create_project(session, name=name, storage_root=tmp_path, owner=None,
                              actor="test").id for name in ("vision", "speech")]  # fmt: skip
    standby = replicas.make(2)
    seen = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    standby.tracker.restore({BoardRef.of_project(i): seen for i in ids})
    time.sleep(0.2)  # past its flush_every (0.1 s): the next call writes
    with replicas.engine.connect() as holder, replicas.engine.connect() as prober:
        holder.execute(text("SELECT 1 FROM boards WHERE project_id = :id FOR UPDATE"),
                       {"id": ids[1]})  # fmt: skip
        flusher = threading.Thread(target=standby._flush_accesses)
        flusher.start()
        try:
            wait_until(lambda: last_access(replicas, ids[0]) == seen, timeout=10,
                       what="the first access written while the second row is held")  # fmt: skip
            assert flusher.is_alive(), "the standby waits for the held row"
            free = prober.execute(
                text("SELECT 1 FROM boards WHERE project_id = :id FOR UPDATE NOWAIT"),
                {"id": ids[0]},
            )  # raises LockNotAvailable if the standby still held the first row
            assert free.scalar() == 1
            prober.rollback()
        finally:
            holder.rollback()
            flusher.join(10)
    assert last_access(replicas, ids[1]) == seen
