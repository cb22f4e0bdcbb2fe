"""The one Settings class: `TBHUB_*` environment variables, then an optional tbhub.toml."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    ByteSize,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tbhub.core.errors import ConfigError, InvalidInput, NoInstance
from tbhub.core.fstype import is_network_filesystem

# Secrets that appear in docs and examples; a deployment using one is not protected.
KNOWN_DEFAULT_SECRETS = frozenset({"changeme", "change-me", "secret", "tbhub", "default", "dev"})
MIN_SECRET_LENGTH = 32
HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")  # fmt: skip
# Addresses that mean "every interface": nobody opens them in a browser.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})


def _config_file() -> Path:
    return Path(os.environ.get("TBHUB_CONFIG", "tbhub.toml"))


# A backup target `user@host:path` (over ssh); anything else is a local path.
REMOTE = re.compile(r"^(?P<host>(?:[^@/:]+@)?[^/:]+):(?P<path>.+)$")


def remote_match(spec: str) -> re.Match[str] | None:
    """The host and path of a `user@host:path` target; None for a local path."""
    return None if spec.startswith(("/", "./")) else REMOTE.match(spec)


class Settings(BaseSettings):
    """Every setting tbhub reads. Documented field by field in README.md#configuration."""

    model_config = SettingsConfigDict(env_prefix="TBHUB_", extra="forbid")

    data_dir: Path = Field(
        default=Path("tbhub-data"),
        description="Where tbhub keeps its database (SQLite), secret key, nginx config and "
        "board state. Must be a local disk.",
    )
    storage_root: Path | None = Field(
        default=None,
        description="Root of the log tree: <storage_root>/<project>/<run>/. "
        "Defaults to <data_dir>/storage.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL. Defaults to SQLite at <data_dir>/tbhub.sqlite3; "
        "use postgresql+psycopg://... for several replicas.",
    )
    public_url: str = Field(
        default="http://127.0.0.1:8080",
        description="The address people open in a browser (http:// or https://, no query). "
        "Defaults to http://<http_host>:<http_port> (127.0.0.1 for 0.0.0.0 or ::).",
    )
    http_host: str = Field(
        default="127.0.0.1",
        description="Address nginx listens on: an IP address (0.0.0.0 or :: for every "
        "interface) or a host name.",
    )
    http_port: int = Field(default=8080, ge=1, le=65535, description="Port nginx listens on.")
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="JSON list of addresses or CIDR ranges of proxies in front of tbhub's nginx "
        "(a TLS site, a load balancer) whose X-Forwarded-For nginx believes, so the client "
        'address (sign-in throttling, audit) is the browser\'s: e.g. ["127.0.0.1"].',
    )
    api_port: int = Field(
        default=8081,
        ge=1,
        le=65535,
        description="Loopback port of the control plane behind nginx.",
    )
    idle_timeout: float = Field(
        default=900.0, gt=0, description="Seconds without a request before a board is stopped."
    )
    board_start_timeout: float = Field(
        default=120.0, gt=0, description="Seconds a board may take to become ready."
    )
    board_stop_grace: float = Field(
        default=5.0, gt=0, description="Seconds to wait after each signal (INT, TERM) on stop."
    )
    reconcile_interval: float = Field(
        default=5.0, gt=0, description="Seconds between supervisor passes when nothing waits."
    )
    session_max_age: int = Field(
        default=12 * 3600, gt=0, description="Seconds a sign-in session lasts."
    )
    secret_key: SecretStr | None = Field(
        default=None,
        description="Signs session cookies. Generated into <data_dir>/secret_key when unset.",
    )
    nginx_bin: str = Field(default="nginx", description="Path to the nginx binary.")
    tensorboard_bin: str | None = Field(
        default=None,
        description="A program to run as each board instead of tbhub's launcher (`python -m "
        "tbhub.supervisor.board_process`, TensorBoard with off-by-default plugins left out). "
        "It gets the launcher's arguments, --tbhub_disable_plugins first.",
    )
    board_domain: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$",
        description="Serve each board on its own origin, <project>.<board_domain> (a "
        "wildcard DNS name pointing at nginx), with a cookie of its own, instead of under "
        "/boards/ on tbhub's origin. See 'Path mode or own-origin mode'.",
    )
    # Sign-in with an OpenID Connect provider (DESIGN.md, "Security model").
    oidc_discovery_url: str | None = Field(
        default=None,
        description="The provider's discovery document (…/.well-known/openid-configuration). "
        "Set it with the client id and secret to show a provider button on the sign-in page.",
    )
    oidc_client_id: str | None = Field(default=None, description="OIDC client id.")
    oidc_client_secret: SecretStr | None = Field(
        default=None, description="OIDC client secret (confidential client)."
    )
    oidc_scopes: str = Field(
        default="openid email profile",
        description="Scopes asked of the provider; add the one that carries groups (often "
        "`groups`) to map groups to teams.",
    )
    oidc_groups_claim: str = Field(
        default="groups", description="The claim that lists the user's groups."
    )
    oidc_group_teams: dict[str, str] = Field(
        default_factory=dict,
        description='JSON {"group": "team"}: a user in the group is made a member of the team '
        "at each sign-in, and taken out when no mapped group of theirs is left. Teams are "
        "created when first needed; memberships added by hand are left alone.",
    )
    oidc_session_max_age: int = Field(
        default=3600,
        gt=0,
        description="Seconds an OIDC sign-in lasts (at most TBHUB_SESSION_MAX_AGE). Going "
        "back through the provider (silent while its own session lasts) re-reads the "
        "user's groups, so leaving a group takes effect within this time.",
    )
    oidc_provider_name: str = Field(
        default="your organisation", description="Shown on the button: 'Sign in with …'."
    )
    local_login: bool = Field(
        default=True,
        description="Offer local password accounts on the sign-in page. Turn off once OIDC "
        "works; the admin CLI still manages local accounts.",
    )
    # How boards start (issue 7): forked from a pre-imported zygote, or exec'd one by one.
    board_launcher: Literal["zygote", "exec"] = Field(
        default="zygote",
        description="zygote: fork boards from one process per data dir that has imported "
        "TensorBoard (a board program that does not run on tbhub's own Python is exec'd); "
        "exec: start a new process for each board.",
    )
    board_state_dir: Path | None = Field(
        default=None,
        description="Where the local backend keeps each board's state file and log (and labels "
        "its processes with this path). Replicas on one host that should adopt each other's "
        "boards point it at the same local directory. Defaults to <data_dir>/boards.",
    )
    # Several `tbhub serve` on one PostgreSQL: one supervisor leader (DESIGN.md decision 12).
    leader_retry_seconds: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="Seconds between a standby replica's tries for the supervisor leader's "
        "lock (PostgreSQL only); a dead leader is replaced about this long after PostgreSQL "
        "drops its connection.",
    )
    # Where boards run (issue 11): subprocesses here, containers on this dockerd, or swarm.
    board_backend: Literal["subprocess", "docker", "swarm"] = Field(
        default="subprocess",
        description="subprocess: boards are processes of this host (TBHUB_BOARD_LAUNCHER); "
        "docker: one container per board on the Docker daemon DOCKER_HOST names (the local "
        "socket by default); swarm: one Docker Swarm service per board, on any node the "
        "constraints allow (the daemon must be a swarm manager). See 'Boards in containers'.",
    )
    board_image: str | None = Field(
        default=None,
        description="The image containerised boards run. Unset: tbhub's own board image for "
        "the Python and TensorBoard tbhub runs on (`tbhub admin board-image build`), built "
        "at start when missing.",
    )
    board_cgroup_memory_ratio: float = Field(
        default=1.5,
        ge=0,
        le=100,
        description="A containerised board's cgroup memory limit, as a multiple of its memory "
        "limit (TBHUB_BOARD_MEMORY_LIMIT or the project's): the kernel's hard stop above "
        "tbhub's PSS check, which replaces a board blue/green first. A board killed there "
        "restarts with reason `oom`. 0: no cgroup limit.",
    )
    board_cpu_limit: float | None = Field(
        default=None,
        gt=0,
        le=1024,
        description="CPUs a containerised board may use (e.g. 1.5). Unset: no limit.",
    )
    installation_id: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9-]{0,39}$",
        description="Names this installation on its board containers and services "
        "(label org.tbhub.installation), so a restarted supervisor, or another replica on "
        "the same database, adopts them and leaves any other installation's alone. Unset: "
        "derived from the database URL (password left out).",
    )
    docker_network: str | None = Field(
        default=None,
        description="The Docker network board containers join; created when missing. "
        "Unset: tbhub-boards-<installation id>.",
    )
    docker_upstream: Literal["published", "network"] = Field(
        default="published",
        description="How nginx and the supervisor reach a board container: published: its "
        "port published on TBHUB_DOCKER_PUBLISH_HOST only (tbhub on the Docker host); "
        "network: the container's address on TBHUB_DOCKER_NETWORK, an internal network "
        "tbhub's own container must be attached to (tbhub in a container).",
    )
    docker_publish_host: str = Field(
        default="127.0.0.1",
        description="The host address a board container's port is published on "
        "(docker_upstream=published).",
    )
    docker_storage_root: Path | None = Field(
        default=None,
        description="The storage root as the Docker daemon sees it, when tbhub runs in a "
        "container (a host path, or a volume's mount point). Unset: TBHUB_STORAGE_ROOT.",
    )
    docker_user: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(:[0-9]+)?$",
        description="uid[:gid] board containers run as. Unset: tbhub's own uid and gid, so "
        "a board reads what a subprocess board would.",
    )
    swarm_constraints: list[str] = Field(
        default_factory=list,
        description="Placement constraints of board services, as a JSON list (e.g. "
        '["node.labels.tbhub-boards==true"]). Every node they allow needs the storage '
        "mounted at the same path and the board image.",
    )
    # Retention (DESIGN.md decision 10): global defaults, overridable per project.
    retention_max_age_days: float | None = Field(
        default=None,
        ge=0,
        description="Runs whose last write is older than this many days are removed by "
        "retention. Unset or 0: no age limit.",
    )
    retention_keep_last: int | None = Field(
        default=None,
        ge=0,
        description="Keep only the newest N runs of a project (by last write); older ones are "
        "removed. Unset or 0: no limit.",
    )
    retention_max_project_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Quota: remove a project's oldest runs until its runs total at most this "
        "many bytes. Unset or 0: no quota.",
    )
    retention_action: Literal["trash", "archive"] = Field(
        default="trash",
        description="What retention does with a run: move it to the trash, or write a verified "
        "tar.gz into the archive root and then delete it.",
    )
    retention_active_minutes: float = Field(
        default=60.0,
        ge=0,
        description="Runs written to in the last this many minutes count as active and are "
        "never removed.",
    )
    retention_interval_hours: float | None = Field(
        default=None,
        gt=0,
        description="When set, `tbhub serve` applies retention every this many hours. "
        "Unset: only `tbhub admin retention apply` does.",
    )
    trash_root: Path | None = Field(
        default=None,
        description="Where retention moves runs. Defaults to <storage_root>/.tbhub-trash: "
        "outside every project and on the same filesystem, so a move is one rename.",
    )
    compare_root: Path | None = Field(
        default=None,
        description="Where compare boards' logdirs live: views of hard links to the event "
        "files of the runs compared. Defaults to <storage_root>/.tbhub-compare: outside every "
        "project and on the storage filesystem, as hard links must be.",
    )
    trash_grace_days: float = Field(
        default=7.0,
        ge=0,
        description="Days a run stays in the trash before it is purged for good.",
    )
    archive_root: Path | None = Field(
        default=None,
        description="Where the archive action writes <project>/<id>-<run>.tar.gz and its "
        "manifest. Defaults to <data_dir>/archive.",
    )
    backup_target: str | None = Field(
        default=None,
        description="Where rsync snapshots go: a local path or user@host:path (over ssh). "
        "Unset: no backups. A relative path is taken from the directory tbhub starts in.",
    )
    backup_interval_hours: float | None = Field(
        default=24.0,
        gt=0,
        description="`tbhub serve` takes a snapshot every this many hours when a backup "
        "target is set. Unset: no scheduled backups.",
    )
    backup_after_change_seconds: float | None = Field(
        default=None,
        gt=0,
        description="When set, `tbhub serve` takes a snapshot this many seconds after the "
        "storage last changed (at most one per interval of this length).",
    )
    backup_keep_daily: int = Field(
        default=7, ge=0, description="Complete snapshots kept: the newest of each of N days."
    )
    backup_keep_weekly: int = Field(
        default=4, ge=0, description="Complete snapshots kept: the newest of each of M weeks."
    )
    backup_retries: int = Field(
        default=3,
        ge=0,
        description="Retries when the backup target is unreachable (rsync/ssh exit codes "
        "5, 10, 12, 30, 35, 255), with exponential backoff.",
    )
    backup_retry_backoff: float = Field(
        default=10.0,
        ge=0,
        description="Seconds before the first retry; each further retry waits twice as long.",
    )
    backup_ssh_command: str = Field(
        default="ssh -o BatchMode=yes -o ConnectTimeout=10",
        description="The remote shell for user@host:path targets (rsync -e and remote commands).",
    )
    backup_rsync_args: list[str] = Field(
        default_factory=list,
        description='Extra rsync arguments for backups, as a JSON list (e.g. ["--bwlimit=50m"]).',
    )

    # Boards that heal themselves (supervisor/plan.py): memory limit, hung boards, budget.
    board_memory_limit: ByteSize = Field(
        default=ByteSize(2 * 1024**3),
        description="PSS a board's processes (TensorBoard and its data server) may use before "
        "it is replaced blue/green; units like 2GiB or 500MB. 0: no limit. Projects can "
        "override it (`tbhub admin board set`).",
    )
    board_memory_budget: ByteSize | None = Field(
        default=None,
        description="Sum of board PSS allowed on this host; starting a board beyond it first "
        "stops the least recently used idle boards. Defaults to half of the host's memory "
        "(or of the cgroup limit in a container). 0: no budget.",
    )
    board_memory_fresh_seconds: float = Field(
        default=300.0,
        ge=0,
        description="A board over its memory limit this soon after starting needs more than "
        "the limit allows: instead of restarting it, memory restarts back off (1, 2, 4 ... 60 "
        "minutes) and the status says so.",
    )
    board_hung_probes: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Health probes in a row a ready board may fail or time out before it counts "
        "as hung and is replaced.",
    )
    board_probe_timeout: float = Field(
        default=2.0, gt=0, le=60, description="Seconds a board's health probe may take."
    )

    # Storage watcher and uploads (issue 8).
    watch_mode: Literal["auto", "inotify", "polling", "off"] = Field(
        default="auto",
        description="How `tbhub serve` watches the storage for runs: `auto` polls on "
        "NFS/CIFS/FUSE (where inotify misses other clients' writes) and uses inotify "
        "elsewhere; `off` disables discovery and change-triggered backups.",
    )
    watch_poll_interval: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds between two walks of the storage tree in polling mode.",
    )
    upload_max_chunk_bytes: int = Field(
        default=16 << 20,
        ge=1 << 16,
        le=1 << 30,
        description="Largest upload request body (one chunk) the server and nginx accept; "
        "bigger bodies get 413.",
    )
    upload_min_free_bytes: int = Field(
        default=1 << 30,
        ge=0,
        description="Uploads are refused (507) when they would leave less than this many "
        "bytes free on the storage filesystem.",
    )
    # The web UI (issue 10).
    project_creation: Literal["admins", "anyone"] = Field(
        default="admins",
        description="Who may create projects from the projects page and POST /api/v1/projects: "
        "instance admins only, or any signed-in user (who becomes its owner).",
    )
    run_stalled_minutes: float = Field(
        default=30,
        gt=0,
        description="A running run whose event files got nothing new for this many minutes "
        "is shown as stalled.",
    )

    # The fields a source gave (a flag, TBHUB_* variable or tbhub.toml), before defaults are
    # derived: what a CLI command sets itself, as opposed to what it may take from the server.
    _given: frozenset[str] = PrivateAttr(default=frozenset())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_given(cls, data: Any, handler: ModelWrapValidatorHandler[Settings]) -> Settings:
        made = handler(data)
        made._given = frozenset(data) if isinstance(data, Mapping) else frozenset()
        return made

    @property
    def given(self) -> frozenset[str]:
        return self._given

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=_config_file())
        return (init_settings, env_settings, toml)

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: list[str]) -> list[str]:
        """Each entry as nginx gets it: a network in its canonical form."""
        networks = []
        for entry in value:
            try:
                networks.append(str(ipaddress.ip_network(entry, strict=False)))
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an address or CIDR range (like 10.0.0.0/8)"
                ) from None
        return networks

    @field_validator("http_host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
        if not HOST_NAME.match(value):
            raise ValueError(
                f"{value[:80]!r} is not an IP address or host name; use e.g. 127.0.0.1, or "
                "0.0.0.0 for every interface"
            )
        return value

    @field_validator("public_url")
    @classmethod
    def _check_public_url(cls, value: str) -> str:
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port out of range
        except ValueError:
            parts = None
        if (parts is None or parts.scheme not in ("http", "https") or not parts.hostname
                or parts.query or parts.fragment or parts.username):  # fmt: skip
            raise ValueError(
                f"{value[:80]!r} is not an http:// or https:// address without a query, e.g. "
                "https://tbhub.example.org"
            )
        return value.rstrip("/")

    @field_validator("secret_key")
    @classmethod
    def _refuse_weak_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        raw = value.get_secret_value()
        if raw.lower() in KNOWN_DEFAULT_SECRETS or len(raw) < MIN_SECRET_LENGTH:
            raise ValueError(
                f"TBHUB_SECRET_KEY is a known default or shorter than {MIN_SECRET_LENGTH} "
                "characters; unset it to have one generated, or use `openssl rand -hex 32`"
            )
        return value

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_discovery_url and self.oidc_client_id and self.oidc_client_secret)

    @model_validator(mode="after")
    def _check_oidc(self) -> Settings:
        given = [self.oidc_discovery_url, self.oidc_client_id, self.oidc_client_secret]
        if any(given) and not all(given):
            raise ValueError(
                "OIDC needs all three of TBHUB_OIDC_DISCOVERY_URL, TBHUB_OIDC_CLIENT_ID and "
                "TBHUB_OIDC_CLIENT_SECRET; set the missing ones or unset all three"
            )
        if not self.local_login and not any(given):
            raise ValueError(
                "TBHUB_LOCAL_LOGIN=false needs OIDC configured, or nobody could sign in"
            )
        return self

    @model_validator(mode="after")
    def _default_public_url(self) -> Settings:
        # Set from a flag, the environment or tbhub.toml: as given. Otherwise where nginx
        # listens, so that `--port 9000` alone gives links and origin checks on 9000.
        if "public_url" not in self.model_fields_set:
            host = "127.0.0.1" if self.http_host in WILDCARD_HOSTS else self.http_host
            self.public_url = f"http://{bracketed(host)}:{self.http_port}"
            self.model_fields_set.discard("public_url")  # derived, still not given
        return self

    @model_validator(mode="after")
    def _resolve_paths(self) -> Settings:
        self.data_dir = self.data_dir.expanduser().absolute()
        if self.storage_root is None:
            self.storage_root = self.data_dir / "storage"
        self.storage_root = self.storage_root.expanduser().absolute()
        if self.board_state_dir is None:
            self.board_state_dir = self.data_dir / "boards"
        self.board_state_dir = self.board_state_dir.expanduser().absolute()
        if self.database_url is None:
            self.database_url = f"sqlite:///{self.data_dir / 'tbhub.sqlite3'}"
        # Absolute where it is read, so the server and a CLI command started elsewhere both
        # show, record and compare the same path.
        if self.backup_target and not remote_match(self.backup_target):
            self.backup_target = str(Path(self.backup_target).expanduser().absolute())
        return self

    # Typed accessors: the validator above guarantees both are set.
    @property
    def storage(self) -> Path:
        assert self.storage_root is not None
        return self.storage_root

    @property
    def board_states(self) -> Path:
        assert self.board_state_dir is not None
        return self.board_state_dir

    @property
    def db_url(self) -> str:
        assert self.database_url is not None
        return self.database_url

    @property
    def api_address(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    @property
    def http_address(self) -> str:
        """Where nginx listens, as nginx's `listen` and URLs write it (IPv6 in brackets)."""
        return f"{bracketed(self.http_host)}:{self.http_port}"

    @property
    def memory_budget_bytes(self) -> int | None:
        """The board memory budget in bytes; None when turned off with 0."""
        if self.board_memory_budget is None:
            return host_memory_bytes() // 2
        return int(self.board_memory_budget) or None


def bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def host_memory_bytes() -> int:
    """Physical memory, or the cgroup (v2 or v1) memory limit when that is lower."""
    import psutil

    total = int(psutil.virtual_memory().total)
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            total = min(total, int(raw))
    return total


def load_settings(*, flags: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Read settings, `overrides` first; turn validation failures into one error naming each
    field. `flags` names the command-line flag each override came from: when only those are
    wrong, the error is InvalidInput naming the flags; otherwise a ConfigError."""
    from pydantic import ValidationError

    flags = flags or {}
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        errors = exc.errors()
        fields = [str(err["loc"][0]) if err["loc"] else "" for err in errors]
        problems = "; ".join(
            f"{flags.get(field) or '.'.join(str(p) for p in err['loc']) or 'settings'}: "
            f"{err['msg'].removeprefix('Value error, ')}"
            for field, err in zip(fields, errors, strict=True)
        )
        if all(field in flags for field in fields):
            raise InvalidInput(problems) from None
        raise ConfigError(f"invalid configuration: {problems}") from None


def data_dir_origin(settings: Settings) -> str:
    """Where the data dir came from, for a message that says where tbhub looked."""
    config = _config_file().absolute()
    if "data_dir" not in settings.given:
        has = "sets no data_dir" if config.is_file() else "does not exist"
        return (f"the default ./tbhub-data of the current directory, as TBHUB_DATA_DIR is not "
                f"set and {config} {has}")  # fmt: skip
    if any(key.upper() == "TBHUB_DATA_DIR" for key in os.environ):
        return "TBHUB_DATA_DIR"
    return f"data_dir in {config}"


def find_instance(settings: Settings) -> Settings:
    """The instance a command acts on, where `tbhub serve` with the same settings runs: its
    database must exist. A server database (PostgreSQL) is named by its URL; a SQLite one is
    a file, which only `tbhub serve`, `tbhub demo` and `tbhub db upgrade` create: made by
    any other command started in the wrong directory, it would be a second, empty instance."""
    from sqlalchemy.engine import make_url

    url = make_url(settings.db_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return settings
    database = Path(url.database).absolute()
    if database.is_file():
        return settings
    raise NoInstance(
        f"no tbhub instance here: its database {database} does not exist (the data dir "
        f"{settings.data_dir} comes from {data_dir_origin(settings)}); nothing was created. "
        "Run the command in the directory `tbhub serve` runs in, or set TBHUB_DATA_DIR to "
        "the server's data dir (or TBHUB_CONFIG to its tbhub.toml, or TBHUB_DATABASE_URL "
        "to its database)"
    )


def prepare_runtime(settings: Settings, *, create: bool = True) -> Settings:
    """Create the data dir, refuse SQLite on network storage, and fill in the secret key.
    With `create` false (a command acting on an instance that exists) no directory is
    created."""
    for name, path in (("data dir", settings.data_dir), ("storage root", settings.storage)):
        if not create:
            break
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            setting = name.upper().replace(" ", "_")
            raise ConfigError(
                f"cannot create the {name} {path}: {exc.strerror}; point TBHUB_{setting} "
                "(or the command's flag) at a directory tbhub may write"
            ) from None
    if (settings.db_url.startswith("sqlite") and settings.data_dir.is_dir()
            and is_network_filesystem(settings.data_dir)):  # fmt: skip
        raise ConfigError(
            f"the data dir {settings.data_dir} is on a network filesystem, where SQLite "
            "corrupts under concurrent access; set TBHUB_DATA_DIR to a local disk or "
            "TBHUB_DATABASE_URL to PostgreSQL"
        )
    # The data dir's key, made there on first need as `tbhub serve` makes it: never a data
    # dir for it (a command on a server database may run where the data dir is not).
    if settings.secret_key is None and (create or settings.data_dir.is_dir()):
        settings.secret_key = SecretStr(_read_or_create_secret(settings.data_dir / "secret_key"))
    return settings


def _read_or_create_secret(path: Path) -> str:
    if path.exists():
        return path.read_text().strip()
    secret = secrets.token_hex(32)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secret + "\n")
    os.replace(tmp, path)
    return secret


def which_or_none(binary: str) -> str | None:
    return shutil.which(binary)
