"""Where the client finds tbhub: arguments, then TBHUB_URL / TBHUB_TOKEN, then the file that
`tbhub login` writes (mode 0600). Standard library only: the client needs nothing but httpx."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tbhub.core.errors import ConfigError

LOGIN_HINT = "set TBHUB_URL and TBHUB_TOKEN, or run `tbhub login --url URL --token-stdin`"


def config_path() -> Path:
    """`$TBHUB_CLIENT_CONFIG`, else `$XDG_CONFIG_HOME/tbhub/client.json` (~/.config/...)."""
    explicit = os.environ.get("TBHUB_CLIENT_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tbhub" / "client.json"


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str | None


def read_file(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}; run `tbhub login` again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} is not a tbhub client config; run `tbhub login` again")
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def load_config(url: str | None = None, token: str | None = None) -> ClientConfig:
    saved = read_file(config_path())
    url = url or os.environ.get("TBHUB_URL") or saved.get("url")
    token = token or os.environ.get("TBHUB_TOKEN") or saved.get("token")
    if not url:
        raise ConfigError(f"no tbhub address known; {LOGIN_HINT}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"tbhub address {url!r} must start with http:// or https://")
    return ClientConfig(url=url.rstrip("/"), token=token)


def save_config(url: str, token: str, path: Path | None = None) -> Path:
    """Write the login file readable by its owner only (0600), atomically."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url.rstrip("/"), "token": token}, fh)
        fh.write("\n")
    os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_TRUNC
    os.replace(tmp, path)
    return path
