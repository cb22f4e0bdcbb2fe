"""tbhub's settings: `TBHUB_*` environment variables, then an optional tbhub.toml.

The fields live in groups, one module each by the part they configure (network, auth,
boards, containers, storage, retention, backup); `Settings` combines them with the checks
that span groups, and this module loads them. A new setting goes into its part's group.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import (
    ModelWrapValidatorHandler,
    PrivateAttr,
    SecretStr,
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
from tbhub.core.settings.auth import KNOWN_DEFAULT_SECRETS, MIN_SECRET_LENGTH, AuthSettings
from tbhub.core.settings.backup import BackupSettings
from tbhub.core.settings.boards import BoardSettings
from tbhub.core.settings.containers import ContainerSettings
from tbhub.core.settings.health import HealthSettings
from tbhub.core.settings.network import HOST_NAME, WILDCARD_HOSTS, NetworkSettings
from tbhub.core.settings.notify import NotifySettings
from tbhub.core.settings.observability import ObservabilitySettings
from tbhub.core.settings.retention import RetentionSettings
from tbhub.core.settings.storage import StorageSettings

__all__ = ["HOST_NAME", "KNOWN_DEFAULT_SECRETS", "MIN_SECRET_LENGTH", "WILDCARD_HOSTS"]


def _config_file() -> Path:
    return Path(os.environ.get("TBHUB_CONFIG", "tbhub.toml"))


# A backup target `user@host:path` (over ssh); anything else is a local path.
REMOTE = re.compile(r"^(?P<host>(?:[^@/:]+@)?[^/:]+):(?P<path>.+)$")


def remote_match(spec: str) -> re.Match[str] | None:
    """The host and path of a `user@host:path` target; None for a local path."""
    return None if spec.startswith(("/", "./")) else REMOTE.match(spec)


class Settings(
    NetworkSettings,
    AuthSettings,
    BoardSettings,
    ContainerSettings,
    StorageSettings,
    RetentionSettings,
    BackupSettings,
    NotifySettings,
    HealthSettings,
    ObservabilitySettings,
    BaseSettings,
):
    """Every setting tbhub reads, by group (the classes it combines); the settings reference
    in the docs is rendered from them."""

    model_config = SettingsConfigDict(env_prefix="TBHUB_", extra="forbid")

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
    def board_plugin_dir(self) -> Path:
        """Where `tbhub admin plugins install` puts the extra plugins boards may load."""
        return self.data_dir / "board-plugins"

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
