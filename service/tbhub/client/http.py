"""The client's HTTP core: one httpx.Client with the bearer token, and the error mapping.

Every non-2xx answer becomes an ApiError carrying the server's `{"error": {code, message}}`;
a 503 with Retry-After (the server did nothing) is retried a few times first.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from tbhub import __version__
from tbhub.client.config import LOGIN_HINT, ClientConfig, load_config
from tbhub.core.errors import TbhubError


class ApiError(TbhubError):
    """An error answer from tbhub (or none at all: status 0), with its stable code."""

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.http_status = status
        self.code = code


def error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
        error = body["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code = "http_error"
        message = f"tbhub answered {response.status_code} {response.reason_phrase}"
    if response.status_code == 401 and "tbhub login" not in message:
        message += f" ({LOGIN_HINT})"
    return ApiError(message, status=response.status_code, code=code)


class Client:
    """A connection to tbhub's /api/v1 as one token (or anonymous)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.config: ClientConfig = load_config(url, token)
        headers = {"User-Agent": f"tbhub-client/{__version__}"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        self.retries = retries
        self.http = httpx.Client(
            base_url=self.config.url, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Send; ApiError for any non-2xx answer or when tbhub cannot be reached."""
        for attempt in range(self.retries + 1):
            try:
                response = self.http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if attempt < self.retries and isinstance(exc, httpx.ConnectError):
                    time.sleep(min(2**attempt * 0.5, 5))
                    continue
                raise ApiError(
                    f"cannot reach tbhub at {self.config.url} ({exc.__class__.__name__}: {exc}); "
                    f"check the address and that tbhub is up, or {LOGIN_HINT}",
                    status=0,
                    code="unreachable",
                ) from None
            retry_after = response.headers.get("retry-after", "")
            if response.status_code == 503 and retry_after.isdigit() and attempt < self.retries:
                time.sleep(min(int(retry_after), 10))
                continue
            if response.is_error:
                raise error_from(response)
            return response
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # -- the API a job needs ----------------------------------------------------------

    def me(self) -> dict[str, Any]:
        return self.json("GET", "/api/v1/me")

    def project(self, project: str) -> dict[str, Any]:
        return self.json("GET", f"/api/v1/projects/{project}")

    def list_projects(self) -> list[dict[str, Any]]:
        """The projects this token (or login) reaches, with its role in each."""
        projects: list[dict[str, Any]] = self.json("GET", "/api/v1/projects")
        return projects

    def create_run(self, project: str, name: str, **fields: Any) -> dict[str, Any]:
        """Register a run; the answer has `id`, `logdir`, `upload_url` and `status`."""
        body = {"name": name, **{k: v for k, v in fields.items() if v is not None}}
        return self.json("POST", f"/api/v1/projects/{project}/runs", json=body)

    def list_runs(self, project: str, **filters: Any) -> dict[str, Any]:
        params = {k: v for k, v in filters.items() if v is not None}
        return self.json("GET", f"/api/v1/projects/{project}/runs", params=params)

    def get_run(self, project: str, run_id: int) -> dict[str, Any]:
        return self.json("GET", f"/api/v1/projects/{project}/runs/{run_id}")

    def update_run(self, project: str, run_id: int, **fields: Any) -> dict[str, Any]:
        body = {k: v for k, v in fields.items() if v is not None}
        return self.json("PATCH", f"/api/v1/projects/{project}/runs/{run_id}", json=body)

    def delete_run(self, project: str, run_id: int) -> dict[str, Any]:
        return self.json("DELETE", f"/api/v1/projects/{project}/runs/{run_id}")

    def compare(self, runs: list[str], *, name: str | None = None) -> dict[str, Any]:
        """A compare board over runs (`PROJECT/RUN_ID`) of any projects the token reads."""
        body: dict[str, Any] = {"runs": runs, **({"name": name} if name is not None else {})}
        return self.json("POST", "/api/v1/compare", json=body)

    def list_views(self, project: str) -> list[dict[str, Any]]:
        """The project's saved views this token (or login) may use."""
        views: list[dict[str, Any]] = self.json("GET", f"/api/v1/projects/{project}/views")
        return views

    def create_view(
        self, project: str, name: str, *, shared: bool = False, filter: dict[str, Any]
    ) -> dict[str, Any]:
        """A saved view: a board over the runs `filter` matches (status, tag, group, q,
        since, until, params); empty fields are left out."""
        flt = {k: v for k, v in filter.items() if v not in (None, [], "")}
        body = {"name": name, "shared": shared, "filter": flt}
        return self.json("POST", f"/api/v1/projects/{project}/views", json=body)

    def delete_view(self, project: str, view_id: int) -> None:
        self.request("DELETE", f"/api/v1/projects/{project}/views/{view_id}")
