"""A real `tbhub serve`: the outbox survives a crash of the server, and a NaN written by a real
writer reaches a webhook through the monitor and the delivery worker on the leader."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from tbhub.core.models import Delivery, Incident, NotificationChannel, Project
from tbhub.health.notify.outbox import enqueue
from tests.e2e.harness import TbhubServer, wait_until
from tests.health.notify_receivers import WebhookReceiver, signature_ok
from tests.health.writers import RunSpec, write_run
from tests.ports import free_port

pytestmark = pytest.mark.e2e

SECRET = "restart-test-secret-0123456789"


@pytest.fixture
def server(tmp_path: Path, database_url: str) -> Iterator[TbhubServer]:
    running = TbhubServer(
        tmp_path / "server", database_url, notify_allow_networks='["127.0.0.1/32"]',
        notify_retry_backoff="1", notify_fold_seconds="0", board_backend="subprocess",
    )  # fmt: skip
    try:
        yield running
    finally:
        running.cleanup()


def add_webhook(server: TbhubServer, url: str) -> None:
    server.add_user("ann", "ann-password-123")
    server.add_project("vision", owner="ann")
    with server.db() as session:
        project = session.scalar(select(Project).where(Project.name == "vision"))
        assert project is not None
        session.add(NotificationChannel(project_id=project.id, name="hook", kind="webhook",
                                        url=url, secret=SECRET, created_by="ann"))  # fmt: skip


def raise_incident(server: TbhubServer, run: str) -> int:
    """An incident recorded in the server's database as the monitor records one."""
    with server.db() as session:
        project = session.scalar(select(Project).where(Project.name == "vision"))
        assert project is not None
        incident = Incident(project_id=project.id, run_path=run, tag="train/loss",
                            detector="nan", severity="error", message=f"NaN in {run}")  # fmt: skip
        session.add(incident)
        session.flush()
        assert enqueue(session, incident) == 1
        return incident.id


def deliveries(server: TbhubServer) -> list[tuple[int | None, str, int]]:
    with server.db() as session:
        rows = session.scalars(select(Delivery).order_by(Delivery.id))
        return [(row.incident_id, row.state, row.attempts) for row in rows]


def test_a_pending_delivery_goes_out_once_after_the_server_is_killed(
    server: TbhubServer,
) -> None:
    """The receiver is down: the first try fails and the delivery waits. The server is
    killed (SIGKILL) and a second incident comes while it is down. After the restart, with
    the receiver up, each goes out exactly once."""
    port = free_port()  # nothing listens there yet
    add_webhook(server, f"http://127.0.0.1:{port}/hook")
    server.start()
    first = raise_incident(server, "exp/first")
    wait_until(lambda: (row := deliveries(server)[0])[1] == "pending" and row[2] >= 1, timeout=30,
               what="the worker on the leader to try the first delivery, and fail")  # fmt: skip
    assert deliveries(server)[0][0] == first
    server.kill()
    second = raise_incident(server, "exp/second")
    with WebhookReceiver("127.0.0.1", port) as receiver:
        server.start()
        received = receiver.wait_for(2, timeout=30)
        time.sleep(4)  # several polls and backoffs later: nothing more comes
        assert len(receiver.received) == 2
    bodies = [json.loads(r.body) for r in received]
    assert sorted(b["incidents"][0]["id"] for b in bodies) == [first, second]
    assert all(signature_ok(SECRET, r) for r in received)
    assert len({r.headers["X-Tbhub-Delivery"] for r in received}) == 2
    assert [state for _, state, _ in deliveries(server)] == ["sent", "sent"]


def test_a_nan_from_a_real_writer_reaches_the_webhook(server: TbhubServer) -> None:
    """torch's SummaryWriter writes a run whose loss and grad norm turn NaN at step 120 and
    stay NaN: the monitor on the leader raises one incident per curve, and the webhook gets
    each once, signed (the NaNs after step 120 are repeats: counted, not sent)."""
    with WebhookReceiver() as receiver:
        add_webhook(server, receiver.url())
        server.start()
        run_dir = server.storage / "vision" / "exp" / "nan-run"
        write_run(run_dir, RunSpec(name="nan-run", writer="torch", kind="nan", steps=200,
                                   bad_step=120))  # fmt: skip
        received = receiver.wait_for(2, timeout=60)
        time.sleep(3)
        assert len(receiver.received) == 2
    assert all(signature_ok(SECRET, request) for request in received)
    incidents = sorted(
        (i["tag"], i["detector"], i["run_path"], i["step"], i["value_text"])
        for request in received for i in json.loads(request.body)["incidents"]
    )  # fmt: skip
    assert incidents == [
        ("train/grad_norm", "nan", "exp/nan-run", 120, "nan"),
        ("train/loss", "nan", "exp/nan-run", 120, "nan"),
    ]
    link = json.loads(received[0].body)["incidents"][0]["link"]
    assert link.startswith(f"{server.base_url}/boards/vision/?runFilter=")
