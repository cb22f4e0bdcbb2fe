"""A backup target: a local directory or `user@host:path` over ssh.

Both run the same small POSIX shell scripts (find, sha256sum, mv, rm), locally or through
the configured ssh command, so the snapshot logic in backup.py has one code path.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tbhub.core.errors import BackupFailed, ConfigError
from tbhub.core.settings import remote_match

# rsync exit codes that mean "could not talk to the other side" (and ssh's own 255).
UNREACHABLE_CODES = frozenset({5, 10, 12, 30, 35, 255})


class TargetUnreachable(BackupFailed):
    code = "backup_target_unreachable"


@dataclass(frozen=True)
class Target:
    spec: str  # as configured
    host: str | None  # None: a local path
    root: str  # the directory snapshots live in (on the host)
    ssh_command: str

    @classmethod
    def parse(cls, spec: str, ssh_command: str) -> Target:
        match = remote_match(spec)
        if match:
            return cls(spec, match["host"], match["path"].rstrip("/") or "/", ssh_command)
        if not spec:
            raise ConfigError("TBHUB_BACKUP_TARGET is empty; set a path or user@host:path")
        return cls(spec, None, str(Path(spec).expanduser().absolute()), ssh_command)

    @property
    def is_local(self) -> bool:
        return self.host is None

    def rsync_path(self, name: str = "") -> str:
        """`name` under the target as rsync spells it (host:path for ssh)."""
        path = f"{self.root}/{name}" if name else self.root
        return path if self.host is None else f"{self.host}:{path}"

    def path(self, name: str = "") -> str:
        return f"{self.root}/{name}" if name else self.root

    def rsync_shell_args(self) -> list[str]:
        return [] if self.host is None else ["-e", self.ssh_command]

    def sh(
        self, script: str, *args: str, stdin: bytes | None = None, timeout: float = 3600
    ) -> bytes:
        """Run `sh -c script sh args...` on the target; raises TargetUnreachable when ssh
        cannot connect and BackupFailed when the script fails."""
        argv = ["sh", "-c", script, "sh", *args]
        if self.host is not None:
            argv = [*shlex.split(self.ssh_command), self.host, shlex.join(argv)]
        try:
            result = subprocess.run(
                argv, input=stdin, capture_output=True, timeout=timeout, start_new_session=True
            )
        except subprocess.TimeoutExpired:
            raise TargetUnreachable(f"{self.spec} did not answer within {timeout:.0f}s") from None
        except FileNotFoundError as exc:
            raise ConfigError(
                f"{exc.filename} is not installed; install it (e.g. apt-get install "
                "openssh-client) or fix TBHUB_BACKUP_SSH_COMMAND"
            ) from None
        if result.returncode == 255 and self.host is not None:
            raise TargetUnreachable(
                f"cannot reach {self.host}: {result.stderr.decode(errors='replace').strip()}"
            )
        if result.returncode != 0:
            raise BackupFailed(
                f"on {self.spec}: `{script.split()[0]} ...` failed: "
                f"{result.stderr.decode(errors='replace').strip()}"
            )
        return result.stdout

    # -- the operations backup.py needs ------------------------------------------------------

    def ensure_root(self) -> None:
        """Create the snapshot directory, but never its parent: a parent that is missing is
        usually a backup disk that is not mounted, and filling the root filesystem instead
        is worse than failing."""
        script = (
            'if [ -d "$1" ]; then exit 0; fi; '
            'if [ ! -d "$(dirname -- "$1")" ]; then printf missing; exit 0; fi; mkdir -- "$1"'
        )
        if self.sh(script, self.root) == b"missing":
            parent = str(Path(self.root).parent)
            where = parent if self.host is None else f"{self.host}:{parent}"
            raise ConfigError(
                f"the backup target's parent directory {where} does not exist (is the backup "
                "disk mounted?); mount or create it, or fix TBHUB_BACKUP_TARGET"
            )

    def snapshots_holding(self, snapshots: list[str], relative: str) -> list[str]:
        """Those of `snapshots` in which `relative` is a real directory (not a symlink)."""
        script = (
            'root=$1; rel=$2; shift 2; for s in "$@"; do '
            'if [ -d "$root/$s/$rel" ] && [ ! -L "$root/$s/$rel" ]; then printf "%s\\0" "$s"; fi; '
            "done"
        )
        out = self.sh(script, self.root, relative, *snapshots)
        return [n for n in out.decode(errors="surrogateescape").split("\0") if n]

    def run_dirs(self, snapshot: str, project: str) -> list[str]:
        """The directories holding event files in a project of a snapshot, relative to the
        project (its runs, as a run path names them)."""
        script = (
            'cd -- "$1/$2/$3" 2>/dev/null || exit 0; '
            "find . -type f -name 'events.out.tfevents.*' -printf '%h\\0'"
        )
        out = self.sh(script, self.root, snapshot, project)
        dirs = {d.removeprefix("./") for d in out.decode(errors="surrogateescape").split("\0")}
        return sorted(d for d in dirs if d and d != ".")

    def entries(self, timeout: float = 3600) -> list[str]:
        """The names in the snapshot directory (none while it does not exist yet)."""
        script = (
            'if [ ! -d "$1" ]; then exit 0; fi; '
            'cd -- "$1" && find . -mindepth 1 -maxdepth 1 -printf "%P\\0"'
        )
        out = self.sh(script, self.root, timeout=timeout)
        return [n for n in out.decode(errors="surrogateescape").split("\0") if n]

    def rename(self, old: str, new: str) -> None:
        self.sh('cd -- "$1" && mv -T -- "$2" "$3"', self.root, old, new)

    def remove(self, name: str) -> None:
        self.sh('cd -- "$1" && rm -rf -- "$2"', self.root, name)

    def write(self, name: str, data: bytes) -> None:
        """Write a file atomically (temp file, then rename)."""
        self.sh('cd -- "$1" && cat > "$2.tmp" && mv -f -- "$2.tmp" "$2"', self.root, name,
                stdin=data)  # fmt: skip

    def read(self, name: str) -> bytes:
        return self.sh('cd -- "$1" && cat -- "$2"', self.root, name)

    def sha256(self, name: str, paths: list[str] | None = None) -> bytes:
        """`sha256sum` output for `paths` (all regular files when None) in snapshot `name`."""
        if paths is None:
            script = 'cd -- "$1/$2" && find . -type f -printf "%P\\0" | xargs -0 -r sha256sum --'
            return self.sh(script, self.root, name)
        data = b"".join(p.encode(errors="surrogateescape") + b"\0" for p in paths)
        return self.sh('cd -- "$1/$2" && xargs -0 -r sha256sum --', self.root, name, stdin=data)
