"""The OpenAPI document as tbhub answers it, and /api/v1/docs served without a CDN.

FastAPI documents a 422 with its own `{"detail": [...]}` body, but every tbhub error is
`{"error": {"code", "message"}}` (http_errors.py). The spec says so, for 422 and for each
4xx an /api/v1 route can answer, so clients (and schemathesis) can rely on it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

DOCS_ASSETS = "/api/v1/docs/assets"
ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string", "description": "Stable, e.g. not_found"},
                "message": {"type": "string", "description": "What went wrong and what to do"},
            },
        }
    },
}
ERROR_REF = {"$ref": "#/components/schemas/Error"}
# Answers any /api/v1 route may give besides its own: bad input (400, 422), no or a bad
# credential (401), not allowed (403), nothing there or not visible (404), a conflict
# (409), the database unreachable (503).
ERROR_STATUSES = {
    "400": "Bad request (e.g. a token in the URL)",
    "401": "No credential, or an unknown, expired or revoked token",
    "403": "Not allowed for this role or token scope",
    "404": "No such thing, or not visible to the caller",
    "409": "Conflict with the current state",
    "422": "Invalid input; the message names the field",
    "503": "The database is unreachable; retry after Retry-After seconds",
}

router = APIRouter(include_in_schema=False)


@router.get("/api/v1/docs")
def docs() -> HTMLResponse:
    """Swagger UI from assets tbhub serves itself: works on an air-gapped install."""
    return get_swagger_ui_html(
        openapi_url="/api/v1/openapi.json",
        title="tbhub API",
        swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
    )


def with_error_shape(spec: dict[str, Any]) -> dict[str, Any]:
    """Declare tbhub's error body on every operation, replacing FastAPI's 422 body."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for methods in spec.get("paths", {}).values():
        for operation in methods.values():
            responses = operation.setdefault("responses", {})
            for status, description in ERROR_STATUSES.items():
                responses[status] = {
                    "description": description,
                    "content": {"application/json": {"schema": ERROR_REF}},
                }
    return spec


def install(app: FastAPI) -> None:
    """Serve the docs page and its assets, and answer the spec with the error shape."""
    app.include_router(router)
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_error_shape(
                get_openapi(
                    title=app.title,
                    version=app.version,
                    description=app.description,
                    routes=app.routes,
                )
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
