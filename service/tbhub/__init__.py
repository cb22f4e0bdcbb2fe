"""tbhub: a self-hosted, multi-user TensorBoard service."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The one place the version is written is pyproject.toml; this reads what was installed.
    __version__ = version("tbhub")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
