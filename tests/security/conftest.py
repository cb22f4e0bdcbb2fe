"""The security suite reuses the end-to-end fixtures (real tbhub serve, nginx, Chromium)."""

from tests.e2e.conftest import browser, make_server  # noqa: F401 - fixtures, by name
