"""Boards as local subprocesses: one TensorBoard per project, each in its own session.

Labels: a state file `<state_dir>/<instance_id>.json` (PID, start time, spec fingerprint,
port) and the environment variables TBHUB_OWNER / TBHUB_INSTANCE, which let a restarted
supervisor find processes whose state file was never written. A board is exec'd or forked
from the board zygote (`launch.py`); either way it looks the same from here on.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Set
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from tbhub.core.processes import (
    DEFAULT_STOP_SIGNALS,
    ProcessRef,
    established_connections,
    group_pss_bytes,
    stop_group,
)
from tbhub.supervisor.backends.launch import ExecLauncher, Launcher, ZygoteLauncher
from tbhub.supervisor.board_process import board_args, launcher_command
from tbhub.supervisor.plan import BoardSpec, Instance

OWNER_ENV = "TBHUB_OWNER"
INSTANCE_ENV = "TBHUB_INSTANCE"
# TensorBoard prints this once it listens; with --port 0 it is how we learn the port.
READY_LINE = re.compile(rb"TensorBoard \S+ at http://([^/\s]+)/")


@dataclass
class BoardState:
    """What the state file of one board process records."""

    instance_id: str
    project: str
    fingerprint: str
    pid: int
    create_time: float
    started_at: float
    upstream: str | None = None
    launcher: str = "exec"  # or "zygote": how the process was started

    @property
    def ref(self) -> ProcessRef:
        return ProcessRef(pid=self.pid, create_time=self.create_time)

    def instance(self, *, alive: bool) -> Instance:
        return Instance(
            instance_id=self.instance_id,
            project=self.project,
            fingerprint=self.fingerprint,
            started_at=self.started_at,
            alive=alive,
            upstream=self.upstream,
        )


def new_instance_id(project: str) -> str:
    return f"{project}-{uuid.uuid4().hex[:8]}"


class LocalBackend:
    """`zygote_dir` set: boards are forked from a zygote living there (exec as a fallback)."""

    def __init__(
        self,
        *,
        state_dir: Path,
        owner: str,
        tensorboard_bin: str | None,
        stop_grace: float,
        zygote_dir: Path | None = None,
        plugin_dir: Path | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.plugin_dir = plugin_dir  # the extra plugins (`tbhub admin plugins install`)
        self.owner = owner
        self.tensorboard_bin = tensorboard_bin
        self.stop_grace = stop_grace
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.launcher: Launcher = ExecLauncher()
        if zygote_dir is not None:
            longest_project = "x" * 63  # names.PROJECT_SLUG
            widest = {OWNER_ENV: owner, INSTANCE_ENV: new_instance_id(longest_project)}
            self.launcher = ZygoteLauncher(
                directory=zygote_dir, state_dir=state_dir, widest_labels=widest
            )
        # Children we started ourselves; polling them reaps their zombies.
        self._children: dict[str, subprocess.Popen[bytes]] = {}

    def command(self, spec: BoardSpec) -> list[str]:
        program = [self.tensorboard_bin] if self.tensorboard_bin else launcher_command()
        path = str(self.plugin_dir) if self.plugin_dir is not None else None
        return [*program, *board_args(spec, plugin_path=path)]

    def start(self, spec: BoardSpec) -> Instance:
        instance_id = new_instance_id(spec.project)
        launched = self.launcher.launch(
            self.command(spec),
            log_path=self._log_path(instance_id),
            labels={OWNER_ENV: self.owner, INSTANCE_ENV: instance_id},
        )
        if launched.child is not None:
            self._children[instance_id] = launched.child
        state = BoardState(
            instance_id=instance_id,
            project=spec.project,
            fingerprint=spec.fingerprint,
            pid=launched.ref.pid,
            create_time=launched.ref.create_time,
            started_at=time.time(),
            launcher=launched.launcher,
        )
        self._write_state(state)
        return state.instance(alive=True)

    def stop(self, instance: Instance, *, force: bool = False) -> None:
        state = self._read_state(instance.instance_id)
        if state is not None:
            signals = (signal.SIGKILL,) if force else DEFAULT_STOP_SIGNALS
            stop_group(
                state.ref, grace=self.stop_grace, label=self._label(instance), signals=signals
            )
        self.forget(instance)

    def list_instances(self, only: Set[str] | None = None) -> list[Instance]:
        self.launcher.maintain()
        for instance_id in list(self._children):
            self._reap_child(instance_id)
        instances = []
        known = (p.stem for p in self.state_dir.glob("*.json")) if only is None else only
        for instance_id in sorted(known):
            state = self._read_state(instance_id)
            if state is None:
                continue
            alive = state.ref.is_alive()
            if alive and state.upstream is None:
                state.upstream = self._find_upstream(state.instance_id)
                if state.upstream is not None:
                    self._write_state(state)
            instances.append(state.instance(alive=alive))
        return instances

    def forget(self, instance: Instance) -> None:
        self._reap_child(instance.instance_id)
        self._state_path(instance.instance_id).unlink(missing_ok=True)
        self._log_path(instance.instance_id).unlink(missing_ok=True)

    def memory_bytes(self, instance: Instance) -> int:
        state = self._read_state(instance.instance_id)
        return group_pss_bytes(state.ref, self._label(instance)) if state else 0

    def active_requests(self, instance: Instance) -> int:
        state = self._read_state(instance.instance_id)
        if state is None or state.upstream is None:
            return 0
        port = int(state.upstream.rsplit(":", 1)[1])
        return established_connections(state.ref, port)

    def reap_unknown(self) -> list[str]:
        known = {p.stem for p in self.state_dir.glob("*.json")}
        reaped = []
        for process in psutil.process_iter():
            try:
                environ = process.environ()
                if environ.get(OWNER_ENV) != self.owner or os.getpgid(process.pid) != process.pid:
                    continue
                instance_id = environ.get(INSTANCE_ENV, "")
                ref = ProcessRef(pid=process.pid, create_time=process.create_time())
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
            if instance_id and instance_id not in known:
                stop_group(ref, grace=self.stop_grace, label=(INSTANCE_ENV, instance_id))
                reaped.append(instance_id)
        return reaped

    def close(self) -> None:
        """Stop helper processes (the zygote); boards are stopped one by one with stop()."""
        self.launcher.close()

    def log_tail(self, instance: Instance, lines: int = 20) -> str:
        try:
            text = self._log_path(instance.instance_id).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- labels and state files ------------------------------------------------------------

    def _label(self, instance: Instance) -> tuple[str, str]:
        return (INSTANCE_ENV, instance.instance_id)

    def _state_path(self, instance_id: str) -> Path:
        return self.state_dir / f"{instance_id}.json"

    def _log_path(self, instance_id: str) -> Path:
        return self.state_dir / f"{instance_id}.log"

    def _read_state(self, instance_id: str) -> BoardState | None:
        try:
            return BoardState(**json.loads(self._state_path(instance_id).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _write_state(self, state: BoardState) -> None:
        path = self._state_path(state.instance_id)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state)))
        os.replace(tmp, path)

    def _find_upstream(self, instance_id: str) -> str | None:
        try:
            with open(self._log_path(instance_id), "rb") as log:
                match = READY_LINE.search(log.read(64 * 1024))
        except OSError:
            return None
        return match.group(1).decode() if match else None

    def _reap_child(self, instance_id: str) -> None:
        """Collect the exit status of a child we started, so it leaves no zombie."""
        child = self._children.get(instance_id)
        if child is not None and child.poll() is not None:
            del self._children[instance_id]
