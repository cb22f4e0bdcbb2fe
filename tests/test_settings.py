from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tbhub.cli.serve_options import settings_from_flags
from tbhub.core import settings as settings_module
from tbhub.core.errors import ConfigError, InvalidInput
from tbhub.core.fstype import filesystem_type, is_network_filesystem
from tbhub.core.settings import Settings, load_settings, prepare_runtime

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


def test_a_flag_wins_over_the_environment_and_the_toml_file(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (clean_env / "tbhub.toml").write_text('http_host = "10.0.0.1"\nhttp_port = 9000\n')
    monkeypatch.setenv("TBHUB_HTTP_PORT", "9100")
    settings = settings_from_flags(host="0.0.0.0", port=9200, public_url=None,
                                   data_dir=clean_env / "d", storage_root=None)  # fmt: skip
    assert (settings.http_host, settings.http_port) == ("0.0.0.0", 9200)
    assert settings.data_dir == clean_env / "d" and settings.storage == clean_env / "d" / "storage"


@pytest.mark.parametrize(
    ("host", "port", "public_url", "expected"),
    [
        ("127.0.0.1", 9000, None, "http://127.0.0.1:9000"),
        ("0.0.0.0", 9000, None, "http://127.0.0.1:9000"),  # every interface: not a browser's
        ("::1", 9000, None, "http://[::1]:9000"),
        ("tbhub.internal", 80, None, "http://tbhub.internal:80"),
        ("0.0.0.0", 9000, "https://tbhub.example.org/", "https://tbhub.example.org"),
    ],
)  # fmt: skip
def test_the_public_url_follows_where_nginx_listens_unless_it_is_set(
    clean_env: Path, host: str, port: int, public_url: str | None, expected: str
) -> None:
    settings = settings_from_flags(host=host, port=port, public_url=public_url,
                                   data_dir=None, storage_root=None)  # fmt: skip
    assert settings.public_url == expected


def test_a_public_url_from_the_environment_is_kept(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TBHUB_PUBLIC_URL", "http://127.0.0.1:8080")
    assert settings_from_flags(host=None, port=9000, public_url=None, data_dir=None,
                               storage_root=None).public_url == "http://127.0.0.1:8080"  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("port", 0, "--port: Input should be greater than or equal to 1"),
        ("port", 65536, "--port: Input should be less than or equal to 65535"),
        ("host", "a b", "--host: 'a b' is not an IP address or host name"),
        ("host", "127.0.0.1:80; include x", "--host: '127.0.0.1:80; include x' is not an IP"),
        ("public_url", "ftp://x", "--public-url: 'ftp://x' is not an http:// or https://"),
        ("public_url", "http://x:99999", "--public-url: 'http://x:99999' is not an http://"),
        ("public_url", "https://x/?next=/", "--public-url: 'https://x/?next=/' is not"),
        ("public_url", "tbhub.example.org", "--public-url: 'tbhub.example.org' is not"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_invalid_input_naming_the_flag(
    clean_env: Path, flag: str, value: object, message: str
) -> None:
    flags: dict[str, object] = dict.fromkeys(
        ("host", "port", "public_url", "data_dir", "storage_root")
    )
    with pytest.raises(InvalidInput) as raised:
        settings_from_flags(**{**flags, flag: value})  # type: ignore[arg-type]
    assert raised.value.message.startswith(message)


def test_the_same_bad_value_in_the_environment_is_a_config_error_naming_the_setting(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TBHUB_HTTP_HOST", "a b")
    with pytest.raises(ConfigError, match="invalid configuration: http_host: 'a b' is not"):
        load_settings()


def test_a_data_dir_that_cannot_be_made_is_a_clear_error(clean_env: Path) -> None:
    (clean_env / "file").write_text("")
    with pytest.raises(ConfigError, match=r"cannot create the data dir .*; point TBHUB_DATA_DIR"):
        prepare_runtime(Settings(data_dir=clean_env / "file" / "d"))
