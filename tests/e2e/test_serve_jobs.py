"""`tbhub serve` runs the job runner: a change in storage is backed up soon after."""

from __future__ import annotations

from collections.abc import Callable

from tbhub.storage.sample_logs import write_run
from tests.e2e.harness import TbhubServer, wait_until
from tests.support.metrics_text import sample


def test_serve_backs_up_soon_after_storage_changes_and_reports_it(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()
    target = server.data_dir.parent / "backups"
    server.env["TBHUB_BACKUP_TARGET"] = str(target)
    server.env["TBHUB_BACKUP_AFTER_CHANGE_SECONDS"] = "1"
    project = server.add_project("vision")
    server.start()

    write_run(project / "run-00", steps=10, tags=1)

    def metric(name: str) -> float | None:
        return sample(server.client().get("/metrics").text, name)

    original = project / "run-00"

    def backed_up() -> bool:
        """The newest complete snapshot (a `<name>.partial/` one is renamed when done) holds
        the run as it is now. Older ones of the day are pruned as newer ones land."""
        snapshots = sorted(p for p in target.glob("2*") if p.is_dir() and "." not in p.name)
        if not snapshots:
            return False
        copy = snapshots[-1] / "vision" / "run-00"
        try:
            return bool(copy.is_dir()) and all(
                (copy / f.name).read_bytes() == f.read_bytes() for f in original.iterdir()
            )
        except FileNotFoundError:  # pruned while we read it
            return False

    wait_until(backed_up, timeout=60, what="a backup of the new run, byte for byte")
    wait_until(
        lambda: metric("tbhub_backup_last_run_success") == 1.0,
        timeout=30,
        what="/metrics to report the successful run",
    )
    age = metric("tbhub_backup_last_complete_age_seconds")
    assert age is not None and 0 <= age < 60


def test_a_backup_the_cli_would_take_to_a_target_the_server_does_not_know_is_refused(
    make_server: Callable[..., TbhubServer],
) -> None:
    server = make_server()  # runs without a backup target
    server.add_project("vision")
    server.start()
    target = server.data_dir.parent / "cli-only-backups"
    server.env["TBHUB_BACKUP_TARGET"] = str(target)  # for the CLI only, as an operator's shell
    refused = server.cli("admin", "backup", "run", check=False)
    assert refused.returncode == 1
    assert (f"TBHUB_BACKUP_TARGET is '{target}' here but unset for the server"
            in refused.stderr), refused.stderr  # fmt: skip
    assert not target.exists()
    metrics = server.client().get("/metrics").text.splitlines()
    assert not [line for line in metrics if line.startswith("tbhub_backup_last_run_success ")]
