"""The flags `tbhub serve` and `tbhub demo` take for the settings people change most. Each
overrides its TBHUB_* variable and tbhub.toml; a bad value is an error naming the flag."""

from __future__ import annotations

from pathlib import Path

import typer

from tbhub.core.settings import Settings, load_settings

HostOption = typer.Option(
    None, "--host", help="Address nginx listens on, e.g. 0.0.0.0 [env: TBHUB_HTTP_HOST]."
)
PortOption = typer.Option(None, "--port", help="Port nginx listens on [env: TBHUB_HTTP_PORT].")
PublicUrlOption = typer.Option(
    None,
    "--public-url",
    help="The address people open, e.g. https://tbhub.example.org (default: "
    "http://HOST:PORT) [env: TBHUB_PUBLIC_URL].",
)
DataDirOption = typer.Option(
    None, "--data-dir", help="Database, secret key, nginx and board state [env: TBHUB_DATA_DIR]."
)
StorageRootOption = typer.Option(
    None,
    "--storage-root",
    help="Root of the log tree, <storage-root>/<project>/<run>/ [env: TBHUB_STORAGE_ROOT].",
)
WorkersOption = typer.Option(
    None,
    "--workers",
    help="Processes that answer the control plane's HTTP [env: TBHUB_API_WORKERS].",
)
FLAGS = {"http_host": "--host", "http_port": "--port", "public_url": "--public-url",
         "data_dir": "--data-dir", "storage_root": "--storage-root",
         "api_workers": "--workers"}  # fmt: skip


def settings_from_flags(
    *,
    host: str | None,
    port: int | None,
    public_url: str | None,
    data_dir: Path | None,
    storage_root: Path | None,
    workers: int | None = None,
) -> Settings:
    """The settings with each flag given in place of its variable."""
    values = {"http_host": host, "http_port": port, "public_url": public_url,
              "data_dir": data_dir, "storage_root": storage_root,
              "api_workers": workers}  # fmt: skip
    given = {field: value for field, value in values.items() if value is not None}
    return load_settings(flags={field: FLAGS[field] for field in given}, **given)
