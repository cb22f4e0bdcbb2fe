"""Backups: rsync snapshots with --link-dest, a sha256 manifest, verify and restore.

A run writes `<name>.partial/` with rsync (hard-linking unchanged files to the newest
complete snapshot), then the manifest `<name>.sha256`, then renames the directory to
`<name>/`. Only that last rename makes a snapshot complete, so an interrupted run is never
taken for a good one; the next run renames the partial directory to its own name and lets
rsync finish it. The manifest hashes only files that are not hard links into the previous
snapshot; the others keep their previous checksum.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from tbhub.core.db import transaction
from tbhub.core.errors import (
    BackupFailed,
    ConfigError,
    InvalidInput,
    NotFound,
    StorageUnavailable,
    TbhubError,
)
from tbhub.core.fstype import is_network_filesystem, network_mounts_below
from tbhub.core.models import BackupRun
from tbhub.core.names import check_project_name
from tbhub.core.settings import Settings
from tbhub.core.timestamps import iso_utc
from tbhub.domain import audit
from tbhub.domain.run_names import similar_runs_hint
from tbhub.housekeeping.config import job_lock, trash_root
from tbhub.housekeeping.manifest import compare, format_manifest, parse_lines
from tbhub.housekeeping.snapshots import (
    MANIFEST,
    PARTIAL,
    classify,
    parse_name,
    snapshot_name,
    to_keep,
)
from tbhub.housekeeping.targets import UNREACHABLE_CODES, Target, TargetUnreachable
from tbhub.storage.compare_view import compare_root
from tbhub.storage.fsops import split_relative
from tbhub.storage.paths import inside_root, project_dir
from tbhub.storage.reach import within

T = TypeVar("T")
STAT_LINES = {
    "files": re.compile(rb"Number of regular files transferred: ([\d,]+)"),
    "bytes": re.compile(rb"Total file size: ([\d,]+)"),
    "transferred_bytes": re.compile(rb"Total transferred file size: ([\d,]+)"),
}


def configured_target(settings: Settings) -> Target:
    if not settings.backup_target:
        raise ConfigError("no backup target; set TBHUB_BACKUP_TARGET to a path or user@host:path")
    if shutil.which("rsync") is None:
        raise ConfigError("rsync is not installed; install it (apt-get install rsync)")
    return Target.parse(settings.backup_target, settings.backup_ssh_command)


def run_rsync(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    """rsync in our process group (so whatever stops us stops it); stopped by its PID if we
    are interrupted while it runs. Its output goes to temporary files, not pipes: a line per
    file through a pipe costs a wake-up per line and slowed large backups by a quarter."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            process.wait()
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            process.wait()
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(args, process.returncode, out.read(), err.read())


def target_full(target: Target) -> BackupFailed:
    return BackupFailed(
        f"the backup target {target.spec} is full (No space left on device); the snapshot "
        "is marked failed and earlier snapshots are intact; free space there or point "
        "TBHUB_BACKUP_TARGET elsewhere, then run `tbhub admin backup run` again"
    )


def rsync_error(
    target: Target, result: subprocess.CompletedProcess[bytes], *, restoring_into: str = ""
) -> TbhubError:
    stderr = result.stderr.decode(errors="replace").strip()
    full = b"No space left on device" in result.stderr or b"Disk quota exceeded" in result.stderr
    if full and not restoring_into:
        return target_full(target)
    last = stderr.splitlines()[-3:] if stderr else []
    direction = (
        f"rsync from {target.spec} into {restoring_into}" if restoring_into
        else f"rsync to {target.spec}"
    )  # fmt: skip
    message = f"{direction} exited with {result.returncode}: {' / '.join(last)}"
    if result.returncode in UNREACHABLE_CODES and not target.is_local:
        return TargetUnreachable(message)
    return BackupFailed(message)


def with_retries(
    action: Callable[[], T],
    *,
    retries: int,
    backoff: float,
    on_retry: Callable[[int, TbhubError], None],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`action()`, tried again after backoff, 2*backoff, ... while the target is unreachable."""
    for attempt in range(retries + 1):
        try:
            return action()
        except TargetUnreachable as exc:
            if attempt == retries:
                raise TargetUnreachable(
                    f"{exc.message}; gave up after {attempt + 1} attempts; check the host, the "
                    "network and TBHUB_BACKUP_SSH_COMMAND"
                ) from None
            on_retry(attempt + 1, exc)
            sleep(backoff * 2**attempt)
    raise AssertionError("unreachable")


@dataclass
class SnapshotResult:
    name: str
    stats: dict[str, int] = field(default_factory=dict)
    resumed: bool = False


# Seconds a backup waits for each network mount of the storage to list its top directory.
MOUNT_CHECK_WAIT = 30.0


def require_readable_storage(settings: Settings) -> None:
    """Refuse, before rsync runs, a storage whose network mounts do not answer: rsync would
    hang on a hung mount, and a dropped one would make a snapshot without its projects."""
    storage = settings.storage.resolve()
    mounts = network_mounts_below(storage)
    if is_network_filesystem(storage):
        mounts.insert(0, storage)
    unreadable = []
    for mount in mounts:
        try:
            within(f"backup:{mount}", partial(os.listdir, mount), timeout=MOUNT_CHECK_WAIT,
                   max_waiting=1)  # fmt: skip
        except StorageUnavailable:
            unreadable.append(str(mount))
    if unreadable:
        raise BackupFailed(
            f"backup did nothing: {', '.join(unreadable)} cannot be read (a network mount "
            "disconnected or not answering), and a snapshot without it would pass for a "
            "complete one; remount it, then run the backup again"
        )


def take_snapshot(settings: Settings, target: Target, now: datetime) -> SnapshotResult:
    require_readable_storage(settings)
    target.ensure_root()
    complete, partial = classify(target.entries())
    name = snapshot_name(now)
    if complete and name <= complete[-1]:  # two runs in one second: names must stay unique
        latest = parse_name(complete[-1])
        assert latest is not None
        name = snapshot_name(latest + timedelta(seconds=1))
    result = SnapshotResult(name)
    if partial:  # an interrupted run: resume into its directory
        newest = partial[-1]
        result.resumed = True
        if newest != name:
            target.rename(newest + PARTIAL, name + PARTIAL)
        for stale in partial[:-1]:
            target.remove(stale + PARTIAL)
    args = ["rsync", "-a", "--delete", "--numeric-ids", "--stats", "-ii", "-8",
            "--out-format=%i %n", *target.rsync_shell_args()]  # fmt: skip
    storage = settings.storage.resolve()
    trash = trash_root(settings).resolve()
    # Trash and compare views are not backed up: rsync would copy each hard link again.
    for kept_aside in (trash, compare_root(settings).resolve()):
        if kept_aside.is_relative_to(storage):
            args.append(f"--exclude=/{kept_aside.relative_to(storage).as_posix()}/")
    args.extend(settings.backup_rsync_args)
    previous = complete[-1] if complete else None
    if previous is not None:
        args.append(f"--link-dest=../{previous}")  # relative to the destination directory
    args += [f"{storage}/", target.rsync_path(name + PARTIAL) + "/"]
    done = run_rsync(args)
    if done.returncode != 0:
        raise rsync_error(target, done)
    for key, pattern in STAT_LINES.items():
        match = pattern.search(done.stdout)
        result.stats[key] = int(match[1].replace(b",", b"")) if match else 0
    try:
        manifest = build_manifest(target, name + PARTIAL, previous, itemized(done.stdout))
        target.write(name + MANIFEST, manifest)
    except BackupFailed as exc:
        raise target_full(target) if "No space left" in exc.message else exc from None
    target.rename(name + PARTIAL, name)
    return result


def read_manifest(target: Target, name: str) -> dict[str, str]:
    text = target.read(name + MANIFEST).decode(errors="surrogateescape")
    return dict(parse_lines(text.splitlines(keepends=True)))


ESCAPED = re.compile(r"\\#([0-7]{3})")


def itemized(stdout: bytes) -> dict[str, str]:
    """path -> rsync's change code for every file in `rsync -ii --out-format='%i %n'`
    output: `hf` hard-linked from --link-dest (unchanged), `>f` written now, `.f` already
    there (a resumed partial snapshot)."""
    files = {}
    for line in stdout.split(b"\n"):
        if len(line) > 12 and line[1:2] == b"f" and line[11:12] == b" ":
            name = line[12:]
            if b"\\#" in name:  # rsync writes control characters as \#ooo
                name = ESCAPED.sub(lambda m: chr(int(m[1], 8)), name.decode("latin-1")).encode(
                    "latin-1"
                )
            files[name.decode(errors="surrogateescape")] = line[:2].decode()
    return files


def build_manifest(
    target: Target, snapshot_dir: str, previous: str | None, changes: dict[str, str]
) -> bytes:
    """sha256 of every file. A file rsync hard-linked to `previous` is unchanged, so it keeps
    its checksum from there; only the files rsync wrote (or found in a resumed partial
    snapshot) are read."""
    old_sums = read_manifest(target, previous) if previous is not None else {}
    reused = {p: old_sums[p] for p, code in changes.items() if code == "hf" and p in old_sums}
    fresh = sorted(set(changes) - set(reused))
    output = target.sha256(snapshot_dir, fresh).decode(errors="surrogateescape") if fresh else ""
    sums = {**reused, **dict(parse_lines(output.splitlines(keepends=True)))}
    return format_manifest(sums.items()).encode(errors="surrogateescape")


# -- the commands ------------------------------------------------------------------------


@dataclass
class BackupReport:
    snapshot: str
    files: int
    bytes: int
    transferred_bytes: int
    attempts: int
    resumed: bool
    pruned: list[str]

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def run_backup(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    actor: str,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, TbhubError], None] = lambda _n, _e: None,
) -> BackupReport:
    """Take one snapshot, then prune by the daily/weekly rule. Raises BackupFailed (the run
    is recorded as failed) when it cannot finish."""
    target = configured_target(settings)
    with job_lock(settings, "backup"):
        with transaction(factory) as session:
            for stale in session.scalars(select(BackupRun).where(BackupRun.state == "running")):
                stale.state, stale.error = "interrupted", "the process stopped before it ended"
            row = BackupRun(target=target.spec, snapshot="", state="running", actor=actor)
            session.add(row)
            session.flush()
            run_id = row.id
        attempts = 0

        def attempt() -> SnapshotResult:
            nonlocal attempts
            attempts += 1
            return take_snapshot(settings, target, datetime.now(UTC))

        def retrying(n: int, exc: TbhubError) -> None:
            on_retry(n, exc)
            with transaction(factory) as session:
                session.get_one(BackupRun, run_id).attempts = n

        try:
            result = with_retries(
                attempt,
                retries=settings.backup_retries,
                backoff=settings.backup_retry_backoff,
                on_retry=retrying,
                sleep=sleep,
            )
        except TbhubError as exc:
            with transaction(factory) as session:
                row = session.get_one(BackupRun, run_id)
                row.state, row.error, row.attempts = "failed", exc.message, attempts
                row.finished_at = datetime.now(UTC)
                audit.record(session, actor=actor, action="backup.failed", target=target.spec,
                             error=exc.message, attempts=attempts)  # fmt: skip
            raise
        pruned = prune(target, settings)
        with transaction(factory) as session:
            row = session.get_one(BackupRun, run_id)
            row.state, row.snapshot, row.attempts = "complete", result.name, attempts
            row.files = result.stats.get("files", 0)
            row.bytes = result.stats.get("bytes", 0)
            row.transferred_bytes = result.stats.get("transferred_bytes", 0)
            row.finished_at = datetime.now(UTC)
            audit.record(session, actor=actor, action="backup.run", target=target.spec,
                         snapshot=result.name, bytes=row.bytes,
                         transferred_bytes=row.transferred_bytes, pruned=pruned)  # fmt: skip
    return BackupReport(
        snapshot=result.name,
        files=result.stats.get("files", 0),
        bytes=result.stats.get("bytes", 0),
        transferred_bytes=result.stats.get("transferred_bytes", 0),
        attempts=attempts,
        resumed=result.resumed,
        pruned=pruned,
    )


def prune(target: Target, settings: Settings) -> list[str]:
    complete, _ = classify(target.entries())
    keep = to_keep(complete, daily=settings.backup_keep_daily, weekly=settings.backup_keep_weekly)
    gone = [name for name in complete if name not in keep]
    for name in gone:
        target.remove(name + MANIFEST)  # first: without its manifest it is no longer complete
        target.remove(name)
    return gone


def list_snapshots(settings: Settings, *, timeout: float = 3600) -> list[dict[str, str]]:
    """Complete and partial snapshots on the target, oldest first; reads only (a target
    directory that does not exist yet holds none)."""
    target = configured_target(settings)
    complete, partial = classify(target.entries(timeout=timeout))
    rows = [{"name": n, "state": "complete"} for n in complete]
    rows += [{"name": n, "state": "partial"} for n in partial]
    return sorted(rows, key=lambda r: r["name"])


def resolve_snapshot(target: Target, name: str | None) -> str:
    complete, _ = classify(target.entries())
    if name is None:
        if not complete:
            raise NotFound(f"no complete snapshot on {target.spec}; run `tbhub admin backup run`")
        return complete[-1]
    if name not in complete:
        raise NotFound(
            f"no complete snapshot {name!r} on {target.spec}; see `tbhub admin backup list`"
        )
    return name


def verify(
    factory: sessionmaker[Session], settings: Settings, *, snapshot: str | None, actor: str
) -> tuple[str, list[dict[str, str]]]:
    """Hash every file of a snapshot and compare with its manifest; every difference."""
    target = configured_target(settings)
    name = resolve_snapshot(target, snapshot)
    expected = read_manifest(target, name)
    output = target.sha256(name).decode(errors="surrogateescape")
    problems = compare(expected, dict(parse_lines(output.splitlines(keepends=True))))
    with transaction(factory) as session:
        audit.record(session, actor=actor, action="backup.verify", target=f"{target.spec}/{name}",
                     files=len(expected), problems=len(problems))  # fmt: skip
    return name, problems


@dataclass
class RestoreReport:
    snapshot: str
    destination: str
    restored: list[str]
    kept_newer: list[str]

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def restore(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    snapshot: str | None = None,
    project: str | None = None,
    run: str | None = None,
    into: Path | None = None,
    force: bool = False,
    actor: str,
) -> RestoreReport:
    """Copy a run, a project or everything from a snapshot into the storage root (or
    `into`). Files that are newer at the destination are kept unless `force`."""
    target = configured_target(settings)
    name = resolve_snapshot(target, snapshot)
    parts: list[str] = []
    if project is not None:
        parts.append(check_project_name(project))
        if run is not None:
            parts.extend(split_relative(run))
    elif run is not None:
        raise InvalidInput("--run needs --project: a run path is inside a project")
    base = (into or settings.storage).expanduser().absolute()
    destination = base.joinpath(*parts)
    if into is None:
        inside_root(settings.storage, destination)
        if project is not None:  # never into another project through a symlinked directory
            project_dir(settings.storage, project)
    if parts:
        require_in_snapshot(target, name, "/".join(parts))
    destination.mkdir(parents=True, exist_ok=True)
    source = target.rsync_path("/".join([name, *parts])) + "/"
    common = ["rsync", "-a", "--numeric-ids", "--out-format=%i %n", *target.rsync_shell_args()]
    done = run_rsync([*common, *([] if force else ["--update"]), source, f"{destination}/"])
    if done.returncode != 0:
        raise rsync_error(target, done, restoring_into=str(destination))
    restored = _itemized_files(done.stdout)
    left = run_rsync([*common, "--dry-run", source, f"{destination}/"])
    kept_newer = _itemized_files(left.stdout) if left.returncode == 0 else []
    with transaction(factory) as session:
        audit.record(session, actor=actor, action="backup.restore", target=str(destination),
                     snapshot=name, files=len(restored), kept_newer=len(kept_newer),
                     force=force)  # fmt: skip
    return RestoreReport(name, str(destination), restored, kept_newer)


def require_in_snapshot(target: Target, snapshot: str, relative: str) -> None:
    """Refuse, before anything is created, to restore what the snapshot does not hold."""
    if target.snapshots_holding([snapshot], relative):
        return
    what = "project" if "/" not in relative else "run"
    others = target.snapshots_holding(classify(target.entries())[0], relative)
    hint = (
        f"snapshots that do: {', '.join(others[-5:])}" if others
        else "no complete snapshot holds it; see `tbhub admin backup list`"
    )  # fmt: skip
    if what == "run" and not others:  # the run path as --run takes it, as `retention pin` says
        project, run = relative.split("/", 1)
        hint = similar_runs_hint(run, target.run_dirs(snapshot, project), otherwise=hint)
    raise NotFound(f"snapshot {snapshot} has no {what} {relative}; {hint}")


def _itemized_files(stdout: bytes) -> list[str]:
    """Files rsync reports as written (`>f...` or `cf...` lines of --out-format=%i %n)."""
    files = []
    for line in stdout.decode(errors="replace").splitlines():
        code, _, path = line.partition(" ")
        if len(code) == 11 and code[1] == "f" and code[0] in "<>ch":
            files.append(path)
    return files


def last_runs(session: Session) -> tuple[BackupRun | None, BackupRun | None]:
    """(the latest finished run, the latest complete run), for /metrics and `backup list`."""
    finished = select(BackupRun).where(BackupRun.state.in_(("complete", "failed")))
    last = session.scalars(finished.order_by(BackupRun.id.desc()).limit(1)).first()
    good = session.scalars(
        select(BackupRun).where(BackupRun.state == "complete").order_by(BackupRun.id.desc())
    ).first()
    return last, good


def recovery_point_age(good: BackupRun | None, now: float) -> float | None:
    """Seconds since the newest complete snapshot finished: what a restore would lose."""
    if good is None or good.finished_at is None:
        return None
    return now - good.finished_at.timestamp()


def run_summary(run: BackupRun | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {"state": run.state, "snapshot": run.snapshot or None, "target": run.target,
            "started_at": iso_utc(run.started_at), "finished_at": iso_utc(run.finished_at),
            "files": run.files,
            "bytes": run.bytes, "transferred_bytes": run.transferred_bytes,
            "attempts": run.attempts, "actor": run.actor, "error": run.error}  # fmt: skip


# A page that lists the snapshots waits at most this long for a remote target.
STATUS_LISTING_SECONDS = 10.0


def backup_status(session: Session, settings: Settings, *, now: float) -> dict[str, Any]:
    """The admin console's and `GET /api/v1/backups`' view: the target, its snapshots (or
    why they could not be listed), the last run, the last complete one, the recovery point."""
    last, good = last_runs(session)
    snapshots: list[dict[str, str]] = []
    listing_error = None
    if settings.backup_target:
        try:
            snapshots = list_snapshots(settings, timeout=STATUS_LISTING_SECONDS)
        except TbhubError as exc:
            listing_error = exc.message
    return {
        "target": settings.backup_target or None,
        "snapshots": snapshots,
        "listing_error": listing_error,
        "last_run": run_summary(last),
        "last_complete": run_summary(good),
        "recovery_point_age_seconds": recovery_point_age(good, now),
    }
