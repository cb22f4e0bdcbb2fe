from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tbhub import settings as settings_module
from tbhub.errors import ConfigError
from tbhub.settings import Settings, load_settings, prepare_runtime
from tbhub.storage.fstype import filesystem_type, is_network_filesystem

MOUNTS = """\
sysfs /sys sysfs rw 0 0
/dev/vda1 / ext4 rw 0 0
server:/export /mnt/nfs nfs4 rw 0 0
//srv/share /mnt/cifs\\040share cifs rw 0 0
sshfs#me@h: /mnt/fuse fuse.sshfs rw 0 0
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for key in list(__import__("os").environ):
        if key.startswith("TBHUB_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("TBHUB_CONFIG", str(tmp_path / "tbhub.toml"))
    return tmp_path


def test_defaults_derive_storage_and_sqlite_from_the_data_dir(clean_env: Path) -> None:
    settings = Settings(data_dir=clean_env / "d")
    assert settings.storage == clean_env / "d" / "storage"
    assert settings.db_url == f"sqlite:///{clean_env / 'd' / 'tbhub.sqlite3'}"
    assert settings.http_port == 8080
    assert settings.idle_timeout == 15 * 60


def test_environment_overrides_the_toml_file(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (clean_env / "tbhub.toml").write_text("http_port = 9000\nidle_timeout = 60\n")
    monkeypatch.setenv("TBHUB_HTTP_PORT", "9100")
    settings = load_settings()
    assert settings.http_port == 9100
    assert settings.idle_timeout == 60


def test_unknown_toml_key_is_a_clear_error(clean_env: Path) -> None:
    (clean_env / "tbhub.toml").write_text("idle_timout = 60\n")
    with pytest.raises(ConfigError, match="idle_timout"):
        load_settings()


@pytest.mark.parametrize("secret", ["changeme", "secret", "short-but-not-default"])
def test_known_default_or_short_secret_is_refused(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("TBHUB_SECRET_KEY", secret)
    with pytest.raises(ConfigError, match="TBHUB_SECRET_KEY"):
        load_settings()


def test_secret_key_is_generated_once_private_and_reused(clean_env: Path) -> None:
    first = prepare_runtime(Settings(data_dir=clean_env / "d"))
    key_file = clean_env / "d" / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    second = prepare_runtime(Settings(data_dir=clean_env / "d"))
    assert first.secret_key is not None and second.secret_key is not None
    assert first.secret_key.get_secret_value() == second.secret_key.get_secret_value()
    assert len(first.secret_key.get_secret_value()) == 64


def test_sqlite_on_a_network_filesystem_is_refused(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings_module, "is_network_filesystem", lambda path: True)
    with pytest.raises(ConfigError, match="network filesystem"):
        prepare_runtime(Settings(data_dir=clean_env / "d"))


def test_postgres_with_the_data_dir_on_nfs_is_allowed(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings_module, "is_network_filesystem", lambda path: True)
    prepare_runtime(Settings(data_dir=clean_env / "d", database_url="postgresql+psycopg://x@h/db"))


@pytest.mark.parametrize(
    ("path", "expected", "network"),
    [
        ("/mnt/nfs/team/logs", "nfs4", True),
        ("/mnt/cifs share/x", "cifs", True),
        ("/mnt/fuse/x", "fuse.sshfs", True),
        ("/home/me", "ext4", False),
        ("/mnt/nfsother", "ext4", False),
    ],
)
def test_filesystem_type_uses_the_longest_mount_prefix(
    tmp_path: Path, path: str, expected: str, network: bool
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(MOUNTS)
    assert filesystem_type(Path(path), mounts) == expected
    assert is_network_filesystem(Path(path), mounts) is network
