"""`with Run(project, name, hparams=...) as run:` — register a run and write into run.logdir.

- Only global rank 0 registers and writes; other ranks get a no-op run whose logdir is a
  scratch directory deleted on exit, so the same code runs on every rank.
- run.logdir is the run's directory on the shared storage when this machine can write there;
  otherwise a local directory that is uploaded in the background and flushed on exit.
- On exit the status is set: finished, failed (an exception), killed (SIGTERM, Ctrl-C).
- Inside `tbhub run -- ...` (TBHUB_RUN_ID set) it joins that run instead of registering one,
  merging its hyperparameters, tags, notes and dataset version into it; the wrapper uploads
  and sets the status.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from tbhub.client.environment import describe_launch, git_lineage, global_rank
from tbhub.client.http import ApiError, Client
from tbhub.core.errors import InvalidInput, TbhubError


def writable_dir(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def exit_status(exc_type: type[BaseException] | None, exc: BaseException | None,
                terminated: bool) -> str:  # fmt: skip
    """How a run ended, from the exception leaving the `with` block."""
    if terminated or (exc_type is not None and issubclass(exc_type, KeyboardInterrupt)):
        return "killed"
    if exc_type is None:
        return "finished"
    if issubclass(exc_type, SystemExit) and isinstance(exc, SystemExit):
        return "finished" if exc.code in (0, None) else "failed"
    return "failed"


def start_uploader(client: Client, upload_url: str, local_dir: Path) -> Any:
    """The background uploader (tbhub.client.upload) for storage this machine cannot reach."""
    from tbhub.client.upload import Uploader  # the uploader ships in the same package

    uploader = Uploader(client.http, upload_url, local_dir)
    uploader.start_background()
    return uploader


def close_upload(uploader: Any, local_dir: Path, *, owned: bool, project: str,
                 run_id: int) -> bool:  # fmt: skip
    """Send what is left. Once the server holds everything, a local directory tbhub made is
    removed; if the upload fails it is kept, and where it is and how to send the rest are
    printed, so nothing is lost. Whether the upload completed."""
    try:
        uploader.close()
    except (TbhubError, OSError) as exc:
        reason = exc.message if isinstance(exc, TbhubError) else str(exc)
        print(f"tbhub: the upload into run {run_id} did not complete ({reason}); the logs stay "
              f"in {local_dir}: send the rest with `tbhub upload {local_dir} --project "
              f"{project} --run {run_id} --finish`", file=sys.stderr)  # fmt: skip
        return False
    if owned:
        shutil.rmtree(local_dir, ignore_errors=True)
    return True


class Run:
    def __init__(
        self,
        project: str,
        name: str | None = None,
        *,
        group: str | None = None,
        hparams: dict[str, Any] | None = None,
        tags: list[str] | None = None,
        notes: str | None = None,
        dataset_version: str | None = None,
        local_dir: str | os.PathLike[str] | None = None,
        upload: bool | None = None,
        client: Client | None = None,
        all_ranks: bool = False,
    ) -> None:
        """`upload`: None decides by whether the storage is writable here; True always
        writes locally and uploads; False refuses to run when the storage is not shared."""
        self.project = project
        self.name = name or Path(describe_launch()["command"].split(" ")[0]).stem or "run"
        self._fields: dict[str, Any] = {
            "group": group,
            "hparams": hparams or {},
            "tags": tags or [],
            "notes": notes,
            "dataset_version": dataset_version,
        }
        self._local_dir = local_dir
        self._upload = upload
        self._client = client
        self._owns_client = client is None
        self.active = all_ranks or global_rank() == 0
        self.id: int | None = None
        self.logdir: str = ""
        self.info: dict[str, Any] = {}
        self.status: str | None = None
        self._manages_status = True
        self._uploader: Any = None
        self._owns_logdir = False
        self._scratch: str | None = None
        self._terminated = False
        self._previous_handler: Any = None

    # -- entering ------------------------------------------------------------------------

    def __enter__(self) -> Run:
        if not self.active:
            self._scratch = self.logdir = tempfile.mkdtemp(prefix="tbhub-noop-rank-")
            return self
        client = self.client
        joined = os.environ.get("TBHUB_RUN_ID")
        if joined and os.environ.get("TBHUB_PROJECT", self.project) == self.project:
            self.info = self._join(client, int(joined))
            self.logdir = os.environ.get("TBHUB_LOGDIR") or self.info["logdir"]
            self._manages_status = False
        else:
            fields = {**git_lineage(), **describe_launch(), **self._fields}
            self.info = client.create_run(self.project, self.name, **fields)
            self.logdir = self._choose_logdir()
        self.id = int(self.info["id"])
        self._install_sigterm()
        return self

    def _join(self, client: Client, run_id: int) -> dict[str, Any]:
        """The wrapper's run, with this Run's hyperparameters, tags, notes and dataset
        version merged in. A group names the run's directory, so a different one is refused
        before the job starts rather than dropped."""
        info = client.get_run(self.project, run_id)
        group = self._fields["group"]
        if group and group != info.get("group"):
            raise InvalidInput(
                f"Run(group={group!r}) cannot join run {run_id} of {self.project}: `tbhub run` "
                f"registered it in group {info.get('group') or 'none'!r}, and a group is part "
                f"of the run's directory. Pass `--group {group}` to tbhub run instead"
            )
        tags = [*info.get("tags", []), *self._fields["tags"]]
        changes = {
            "hparams": self._fields["hparams"] or None,
            "tags": list(dict.fromkeys(tags)) if self._fields["tags"] else None,
            "notes": self._fields["notes"],
            "dataset_version": self._fields["dataset_version"],
        }
        if any(value is not None for value in changes.values()):
            info = client.update_run(self.project, run_id, **changes)
        return info

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client()
        return self._client

    def _choose_logdir(self) -> str:
        shared = str(self.info["logdir"])
        if self._upload is not True and writable_dir(shared):
            return shared
        if self._upload is False:
            raise RuntimeError(f"{shared} is not writable from here and upload=False")
        self._owns_logdir = self._local_dir is None
        local = Path(self._local_dir or tempfile.mkdtemp(prefix=f"tbhub-run-{self.info['id']}-"))
        local.mkdir(parents=True, exist_ok=True)
        self._uploader = start_uploader(self.client, str(self.info["upload_url"]), local)
        return str(local)

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous_handler = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            self._terminated = True
            previous = self._previous_handler
            if callable(previous):
                previous(signum, frame)
            else:
                raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, on_sigterm)

    # -- while running -------------------------------------------------------------------

    def log_summary(self, **metrics: float) -> None:
        """Merge summary metrics (final accuracy, best loss...) into the run's record."""
        if self.active and self.id is not None:
            self.info = self.client.update_run(self.project, self.id, metrics=metrics)

    def update(self, **fields: Any) -> None:
        """Set notes or tags (or the status) while the run goes on."""
        if self.active and self.id is not None:
            self.info = self.client.update_run(self.project, self.id, **fields)

    # -- leaving -------------------------------------------------------------------------

    def _report_status(self, *, failing: bool) -> None:
        """Set the final status; when the job is failing already, a failure to report it is
        printed rather than raised over the job's own exception."""
        assert self.id is not None and self.status is not None
        try:
            self.info = self.client.update_run(self.project, self.id, status=self.status)
        except ApiError as exc:
            if not failing:
                raise
            print(f"tbhub: could not mark run {self.id} {self.status}: {exc.message}",
                  file=sys.stderr)  # fmt: skip

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                return
            if self._previous_handler is not None:
                signal.signal(signal.SIGTERM, self._previous_handler)
            self.status = exit_status(exc_type, exc, self._terminated)
            if self._uploader is not None:  # the last bytes go up before the status says "done"
                assert self.id is not None
                sent = close_upload(self._uploader, Path(self.logdir), owned=self._owns_logdir,
                                    project=self.project, run_id=self.id)  # fmt: skip
                if not sent and self.status == "finished":
                    self.status = "failed"
            if self._manages_status and self.id is not None:
                self._report_status(failing=exc_type is not None)
        finally:
            if self._owns_client and self._client is not None:
                self._client.close()
